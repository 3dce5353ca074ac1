"""The integration tests share the repository's upstream cache (.cache/forkbuild: its git
repository, worktrees and wheels): under pytest-xdist they all run in one worker, in order,
as without it, while the unit tests spread over the other workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.image.docker import Docker

HERE = Path(__file__).parent
GROUP = "tests/integration/"


@pytest.fixture(scope="module")
def context() -> Context:
    """The repository's series and upstream cache."""
    return Context.create(series_dir=HERE.parents[1], cache_dir=None, reporter=Reporter())


@pytest.fixture(scope="module")
def docker(context) -> Docker:
    """The docker daemon FORKBUILD_DOCKER_HOST names (the image tests skip without one)."""
    return Docker.connect(reporter=context.reporter, host=os.environ.get("FORKBUILD_DOCKER_HOST", ""))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # First in the queue: the group is the longest unit; the unit tests fill the other workers meanwhile.
    items.sort(key=lambda item: HERE not in item.path.parents)  # stable: each part keeps its order


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    # One scope for every integration test, one per test for the rest. (xdist's `loadgroup`
    # would do it by marker, but it renames node ids, which pytest 9.2 no longer lets it do.)
    from xdist.scheduler import LoadScopeScheduling

    class OneCacheUser(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return GROUP if nodeid.startswith(GROUP) else nodeid

    return OneCacheUser(config, log)
