"""Patched wheels: by overlay on the pinned release wheel (default) or built from
a git checkout (source mode). `builder.build_wheels` is the entry point."""
