# A Python 3.11 base made without a registry: a Debian bookworm minbase root
# file system (debootstrap, imported as ROOTFS by `forkbuild build-base`) plus
# a venv, because Debian's Python is "externally managed" (PEP 668).
ARG ROOTFS
FROM ${ROOTFS}
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/python -m pip --version
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    VIRTUAL_ENV=/opt/venv \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    LANG=C.UTF-8
CMD ["python3"]
