"""The part of forkbuild that runs inside an image, with the image's own Python.

Standard library only: images have no forkbuild installed. An image build
copies this package to /opt/forkbuild/forkbuild_runtime and runs
`python3 -m forkbuild_runtime {delta-plan,check,doctor}` (docker/entrypoint.sh).
Relative imports only, so it works under either package name.
"""
