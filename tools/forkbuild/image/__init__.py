"""Docker images of a variant: base images, build contexts, Dockerfiles, compose.

`runtime/` is the part that runs inside an image (stdlib only): the delta
planner, the build-time check and `doctor`.
"""
