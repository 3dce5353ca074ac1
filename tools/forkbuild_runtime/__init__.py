"""forkbuild's program inside an image, run by the image's own Python: standard library and
relative imports only. An image build copies it to /opt/forkbuild/forkbuild_runtime;
docker/entrypoint.sh runs `python3 -m forkbuild_runtime {delta-plan,check,doctor}`."""


class ImageError(Exception):
    """The image is not what it should be; the message says what and how to fix it."""
