"""rebase's porter (rebase/porter.py) on fixture files shaped like the real series' hunks: what
git's rungs stop on is placed hunk by hunk, and the three wrong placements reduced context and a
one-sided anchor make on sglang 0.5.22 are refused by the placement check; a hunk that uses a
name its module does not import, or an option the release lacks, is refused; an import goes into
the list of its siblings."""

from __future__ import annotations

from pathlib import Path

from forkbuild.io.git import Git
from forkbuild.rebase.porter import Porter, places

PATH = "python/sglang/srt/models/deepseek_v4.py"


def port(tmp_path: Path, *, base: str, patched: str, new: str, extra: dict[str, str] | None = None):
    """old release `base` -> the patch's `patched`; the new release's file `new`: the porter's result."""
    repo = Git.init(tmp_path / "repo")
    target = repo.path / PATH
    target.parent.mkdir(parents=True)

    def commit(text: str, message: str, files: dict[str, str] | None = None) -> str:
        target.write_text(text)
        for name, content in (files or {}).items():
            (repo.path / name).parent.mkdir(parents=True, exist_ok=True)
            (repo.path / name).write_text(content)
        repo.run("add", "-A")
        return repo.commit(message)

    old_base = commit(base, "old release", extra)
    old_commit = commit(patched, "the patch\n\nFeature: f\n")
    repo.run("checkout", "-q", "--detach", old_base)
    new_head = commit(new, "new release", extra)
    return Porter(repo, old_commit=old_commit, new_head=new_head).port()


MODEL = '''\
import torch

from sglang.srt.layers.linear import ReplicatedLinear
from sglang.srt.utils import add_prefix


class DeepseekV4DecoderLayer:
    def __init__(self, config):
        self.config = config
        self.layers = []
        self.mlp = None

    def op_moe(self, state):
        state = self.mlp(state)
        return state


class DeepseekV4Model:
    def __init__(self, config):
        self.config = config
        self.layers = []
        return None
'''
# The patch adds a line to DeepseekV4Model.__init__ after `self.config = config`.
HEAD, MODEL_CLASS = MODEL.split("class DeepseekV4Model:")
MODEL_PATCHED = HEAD + "class DeepseekV4Model:" + MODEL_CLASS.replace("        self.layers = []\n",
                                                                      "        self.engram = None\n        self.layers = []\n")
# The new release rewrote the line after it: with one line of context (-C1) the hunk's lines match only in
# DeepseekV4DecoderLayer.__init__, where git would put it.
MODEL_NEW = MODEL.replace("        self.layers = []\n        return None\n",
                          "        self.layers = [None] * config.n\n        return None\n")
assert MODEL_NEW != MODEL


def test_reduced_context_into_another_class_is_refused(tmp_path) -> None:
    result = port(tmp_path, base=MODEL, patched=MODEL_PATCHED, new=MODEL_NEW)
    [hunk] = result.hunks
    # -C1 (tried first) would put it into DeepseekV4DecoderLayer.__init__: refused; the leading context,
    # intact, places it where it belongs.
    assert hunk.status == "ported" and hunk.rung == "leading anchor", hunk
    assert hunk.place == "DeepseekV4Model.__init__"
    decoder, model = result.files[PATH].split("class DeepseekV4Model:")
    assert "self.engram" not in decoder and "        self.config = config\n        self.engram = None\n" in model


def test_reduced_context_alone_into_another_class_is_refused(tmp_path) -> None:
    # Both sides of the context rewritten in the new release: only -C1 matches, in the wrong class.
    new = MODEL_NEW.replace("class DeepseekV4Model:\n    def __init__(self, config):\n",
                            "class DeepseekV4Model:\n    def __init__(self, config, prefix=''):\n")
    result = port(tmp_path, base=MODEL, patched=MODEL_PATCHED, new=new)
    [hunk] = result.hunks
    assert hunk.status == "failed", hunk
    assert "context-1: lands in DeepseekV4DecoderLayer.__init__, not in DeepseekV4Model.__init__" in hunk.checks
    assert result.files[PATH] == new


FORWARD = '''\
class MQALayer:
    def forward(self, x):
        q = self.q_proj(x)
        k = self.k_proj(x)
        out = self.attn(q, k)
        return out


class DeepseekV4DecoderLayer:
    def forward(self, x):
        q = self.q_proj(x)
        k = self.k_proj(x)
        out = self.attn(q, k)
        return out + x
'''
# The patch edits MQALayer.forward; the new release rewrote the lines around it there, so with one line of
# context (-C1) only DeepseekV4DecoderLayer.forward still matches.
FORWARD_PATCHED = FORWARD.replace("        k = self.k_proj(x)\n", "        k = self.k_proj(x)\n        q = q * self.scale\n", 1)
FORWARD_NEW = FORWARD.replace("        q = self.q_proj(x)\n        k = self.k_proj(x)\n        out = self.attn(q, k)\n",
                              "        q = self.q_norm(self.q_proj(x))\n        k = self.k_proj(x)\n"
                              "        out = self.attn(q, k, causal=True)\n", 1)


def test_a_hunk_for_one_forward_is_not_put_into_another(tmp_path) -> None:
    result = port(tmp_path, base=FORWARD, patched=FORWARD_PATCHED, new=FORWARD_NEW)
    [hunk] = result.hunks
    assert hunk.status == "failed", hunk
    assert "lands in DeepseekV4DecoderLayer.forward, not in MQALayer.forward" in hunk.checks
    assert result.files[PATH] == FORWARD_NEW  # nothing of it applied


IMPORTS = '''\
import os

from sglang.srt.layers.linear import ReplicatedLinear
from sglang.srt.utils import add_prefix

from torch import nn

LIMITS = {
    "max_tokens": 4096,
    "max_batch": 256,
    "max_layers": 61,
    "max_experts": 256,
}


def build():
    """The pieces."""
    return ReplicatedLinear, add_prefix, nn, os
'''
IMPORTS_PATCHED = IMPORTS.replace("from sglang.srt.utils import add_prefix\n",
                                  "from sglang.srt.utils import add_prefix\nfrom sglang.srt.environ import envs\n") \
    .replace('    """The pieces."""\n', '    """The pieces."""\n    if envs.SGLANG_ENGRAM:\n        return None\n')
# The new release reordered its imports: the import hunk's context is gone.
IMPORTS_NEW = IMPORTS.replace("import os\n\nfrom sglang.srt.layers.linear import ReplicatedLinear\n"
                              "from sglang.srt.utils import add_prefix\n\nfrom torch import nn\n",
                              "import os\n\nfrom torch import nn\n\nfrom sglang.srt.layers.linear import ReplicatedLinear\n"
                              "from sglang.srt.utils import add_prefix, is_cuda\n")
ENVIRON = {"python/sglang/srt/environ.py": "class Envs:\n    SGLANG_ENGRAM = False\n\nenvs = Envs()\n"}


def test_an_import_goes_into_its_siblings_list(tmp_path) -> None:
    result = port(tmp_path, base=IMPORTS, patched=IMPORTS_PATCHED, new=IMPORTS_NEW, extra=ENVIRON)
    assert [hunk.status for hunk in result.hunks] == ["ported", "ported"], result.hunks
    text = result.files[PATH]
    assert "from sglang.srt.utils import add_prefix, is_cuda\nfrom sglang.srt.environ import envs\n" in text
    assert "    if envs.SGLANG_ENGRAM:" in text
    compile(text, PATH, "exec")


def test_a_one_sided_anchor_into_the_wrong_import_list_is_refused(tmp_path) -> None:
    # The import hunk's trailing context (`from torch import nn` after a blank) anchors it after `import os`.
    result = port(tmp_path, base=IMPORTS, patched=IMPORTS_PATCHED, new=IMPORTS_NEW, extra=ENVIRON)
    text = result.files[PATH]
    assert "import os\nfrom sglang.srt.environ import envs\n" not in text
    assert result.hunks[0].rung == "import"


def test_a_hunk_whose_module_lacks_its_import_is_refused(tmp_path) -> None:
    # Only the body hunk: `envs` is not imported in the module, and the patch does not import it.
    patched = IMPORTS.replace('    """The pieces."""\n', '    """The pieces."""\n    if envs.SGLANG_ENGRAM:\n        return None\n')
    new = IMPORTS_NEW.replace("def build():\n", "def build(lazy=False):\n")
    result = port(tmp_path, base=IMPORTS, patched=patched, new=new, extra=ENVIRON)
    [hunk] = result.hunks
    # Each rung refused it for the same reason: said once, with the rungs that gave it.
    assert hunk.status == "failed" and hunk.checks == "3-way, context-1, trailing anchor: leaves undefined: envs", hunk
    assert "envs" not in result.files[PATH]


def test_a_name_the_new_release_lacks_is_refused(tmp_path) -> None:
    patched = IMPORTS_PATCHED
    new = IMPORTS_NEW.replace("def build():\n", "def build(lazy=False):\n")
    # The new release has no SGLANG_ENGRAM in its environ.py.
    result = port(tmp_path, base=IMPORTS, patched=patched, new=new,
                  extra={"python/sglang/srt/environ.py": "class Envs:\n    SGLANG_OTHER = False\n\nenvs = Envs()\n"})
    body = [hunk for hunk in result.hunks if hunk.hunk == 2]
    assert body and body[0].status == "failed" and "names what the new release lacks: SGLANG_ENGRAM" in body[0].checks


def test_a_hunk_whose_code_is_gone_is_moot(tmp_path) -> None:
    new = MODEL.replace("class DeepseekV4Model:\n    def __init__(self, config):\n        self.config = config\n"
                        "        self.layers = []\n        return None\n", "")
    result = port(tmp_path, base=MODEL, patched=MODEL_PATCHED, new=new)
    [hunk] = result.hunks
    assert hunk.status == "moot" and "has no DeepseekV4Model.__init__, where it belongs" in hunk.checks, hunk


def test_places_names_the_innermost_class_or_function() -> None:
    assert places(MODEL, [14, 20, 1]) == {"DeepseekV4DecoderLayer.op_moe", "DeepseekV4Model.__init__", "<module>"}


def test_an_import_the_new_release_lacks_is_added_to_its_siblings(tmp_path) -> None:
    # The old release's module imported envs; the new release's does not: the ported hunk brings the import.
    base = IMPORTS.replace("from sglang.srt.utils import add_prefix\n",
                           "from sglang.srt.utils import add_prefix\nfrom sglang.srt.environ import envs\n")
    patched = base.replace('    """The pieces."""\n', '    """The pieces."""\n    if envs.SGLANG_ENGRAM:\n        return None\n')
    new = IMPORTS_NEW.replace("def build():\n", "def build(lazy=False):\n")
    result = port(tmp_path, base=base, patched=patched, new=new, extra=ENVIRON)
    [hunk] = result.hunks
    assert hunk.status == "ported" and hunk.rung.endswith("+ import") and hunk.place == "build", hunk
    assert "from sglang.srt.utils import add_prefix, is_cuda\nfrom sglang.srt.environ import envs\n" in result.files[PATH]


def test_a_port_is_a_proposal_that_continue_accepts(git_series_fx) -> None:
    # 2.0 rewrites the line after alpha's insertion: git's rungs stop; the porter places it after
    # `def scale(value):` (its leading context), stages it, and stops; --continue makes it "ported".
    import json

    from rebase_fixtures import NEW_VERSION, rebase_args, release, tree

    fx = git_series_fx
    commit = release(fx, (("python/pkg/core.py", "    return value * 2\n", "    return value * 2  # doubled in 2.0\n"),))
    assert fx.cli(*rebase_args(commit)) == 9
    staged = (tree(fx).path / "python/pkg/core.py").read_text()
    assert "<<<<<<<" not in staged and "    if envs.DSV41_ALPHA:\n        return value * 3\n    return value * 2  # doubled" in staged
    assert fx.cli("rebase", "--continue") == 0
    report = json.loads((fx.root / "build" / "rebase" / f"1.0-to-{NEW_VERSION}.json").read_text())
    alpha = next(patch for patch in report["patches"] if patch["file"] == "alpha-scale.patch")
    assert alpha["outcome"] == "ported" and alpha["port"][0]["place"] == "scale"
    md = (fx.root / "build" / "rebase" / f"1.0-to-{NEW_VERSION}.md").read_text()
    assert "## Ported hunk by hunk" in md and "python/pkg/core.py hunk 1: ported (leading anchor) in scale" in md
