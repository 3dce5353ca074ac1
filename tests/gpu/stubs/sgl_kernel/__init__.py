"""A stand-in for sgl_kernel on the lent GPU: importable, raises when called (see forkbuild_stub)."""

from forkbuild_stub import make_stand_in

make_stand_in(globals())
