# The python base plus the pinned, unmodified sglang release wheel in the
# venv's site-packages, installed --no-deps the way a pip user would: the base
# a `delta` image layers its changed files on. The context holds only the wheel.
ARG PYTHON_BASE
FROM ${PYTHON_BASE}
ARG WHEEL
RUN --mount=type=bind,source=.,target=/tmp/fb-wheel \
    python3 -m pip install --no-deps --no-index "/tmp/fb-wheel/${WHEEL}" \
 && python3 -m pip show sglang
