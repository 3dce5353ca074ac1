"""The one error of the in-image tools. Standard library only (runs inside images)."""


class ImageError(Exception):
    """The image is not what it should be; the message says what and how to fix it."""
