"""Docker images of a variant: base images, build contexts, builds, the compose file;
`runtime/` is what runs inside an image (stdlib only)."""
