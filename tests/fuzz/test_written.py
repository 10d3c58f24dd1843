"""Fuzzing what kvbench writes (issue 40, classes of their own generators): values that end
up in an sbatch script (quoted or refused, never a directive lost or a shell line added),
secrets in every spelling a user or server gives them (never in what is written), and long
adversarial strings through the redaction every written file passes (linear: no case near
its alarm). In-process and deterministic (derandomized hypothesis, no shrinking); the
figures are printed at the end (recorded in docs/reliability.md)."""

from __future__ import annotations

import base64
import json
import os
import shlex
import tempfile
import urllib.parse
from collections import Counter
from pathlib import Path

import pytest
from fixtures.alarm import bounded
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvbench import redaction
from kvbench.errors import SweepOptionError

FIGURES: Counter = Counter()
SETTINGS = settings(deadline=None, derandomize=True, database=None,
                    phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
# ---- sbatch scripts --------------------------------------------------------------------

# what a hostile or careless value holds: shell and sbatch syntax, line ends, quotes
HOSTILE = st.text(alphabet=st.sampled_from([*"abz09_.-,:%/ ", *"\n\r\t\"'\\#;$`&|()<>*!~=@",
                                            "\x00", "\x1b", "é"]), max_size=24)
NAMES = st.from_regex(r"[A-Za-z0-9_.\-]{1,12}(,[A-Za-z0-9_.\-]{1,12}){0,2}", fullmatch=True)
TIMES = st.sampled_from(["30", "08:00:00", "1-02:00", "2-00:00:00", "UNLIMITED", "90:00"])


def sbatch_words(text: str) -> list[str]:
    """The words sbatch reads from an #SBATCH line's text, as its manual and parser state
    them: whitespace separates, quotes group, a backslash takes the next character as is,
    an unquoted '#' ends the line; None for a line sbatch rejects (an open quote, a word
    starting with ':'). The test's own model, independent of kvbench's."""
    words: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i == n or text[i] == "#":
            return words
        if text[i] == ":":
            return None
        word, quote = [], None
        while i < n and (quote or not text[i].isspace()):
            c = text[i]
            if c == "\\" and i + 1 < n:
                word.append(text[i + 1])
                i += 2
                continue
            if quote and c == quote:
                quote = None
            elif not quote and c in "'\"":
                quote = c
            elif not quote and c == "#":
                break
            else:
                word.append(c)
            i += 1
        if quote:
            return None
        words.append("".join(word))
        if i < n and text[i] == "#":
            return words


@pytest.fixture(scope="module")
def sbatch_spec():
    from kvbench.matrix import Job
    from kvbench.sweep import RunOptions, build_specs

    row = {"exp-name": "a", "framework": "sglang", "model": "m", "runner": "cluster:x",
           "tp": 4, "pp": 2, "pcp-size": 1, "conc": 2}
    return build_specs([Job("k", row, "agentic-coding")], RunOptions())[0]


@settings(SETTINGS, max_examples=250)
@given(data=st.data())
def test_values_written_into_an_sbatch_script(data, sbatch_spec):
    """--partition, --account, --time-limit, --sbatch-arg and the results path, drawn from
    shell and sbatch syntax: refused in one line naming the option, or written so that
    sbatch reads every directive kvbench meant (its own ones word for word, the results
    path as one word), bash runs exactly one command, and nothing else is a line."""
    from kvbench.sweep import SlurmExecutor
    from kvbench.sweep.slurm import Resources

    def draw_value(fine):
        return data.draw(st.one_of(st.none(), fine, HOSTILE))

    kw = {"partition": draw_value(NAMES), "account": draw_value(NAMES),
          "time_limit": draw_value(TIMES),
          "sbatch_args": data.draw(st.lists(st.one_of(
              st.sampled_from(["--qos=high", "--comment='a b'", "--mem 0", "-C h100"]),
              HOSTILE.map(lambda t: "--" + t)), max_size=2))}
    results = Path("/r") / (data.draw(st.one_of(NAMES, HOSTILE, st.sampled_from(
        ["my results", "a#b", 'q"uote', "back\\slash", "it's", ":x", "a b #c"]))) or "x")
    array_dir = results / "slurm" / "arr"
    FIGURES["sbatch inputs"] += 1
    try:
        ex = SlurmExecutor(python="/opt/py/bin/python", **kw)
        text = ex.script([sbatch_spec], Resources.of(sbatch_spec), array_dir, results)
    except SweepOptionError as e:
        FIGURES["sbatch clean errors"] += 1
        message = str(e)
        assert "\n" not in message and "allowed:" in message and e.exit_code == 2, message
        assert message.startswith(("--partition", "--account", "--time-limit", "--sbatch-arg",
                                   "results directory")), message
        return
    FIGURES["sbatch accepted"] += 1
    lines = text.splitlines()
    FIGURES["sbatch accepted with a quoted results path"] += lines[2].endswith('"')
    body = lines.index("set -euo pipefail")
    assert lines[0] == "#!/bin/bash" and len(lines) == body + 2, text
    directives = [sbatch_words(ln.removeprefix("#SBATCH")) for ln in lines[1:body]]
    assert all(ln.startswith("#SBATCH ") for ln in lines[1:body]), text
    assert None not in directives, text  # sbatch would refuse the whole script
    meant = [["--job-name=kvbench-arr"], [f"--output={array_dir}/task-%a.log"]]
    meant += [[f"{flag}={v}"] for flag, v in (("--partition", kw["partition"]),
                                               ("--account", kw["account"]),
                                               ("--time", kw["time_limit"])) if v]
    meant += [["--array=0-0"], ["--nodes=1"], ["--ntasks=1"], ["--gres=gpu:8"],
              ["--exclusive"]]
    assert directives[:len(meant)] == meant, (kw, results, text)
    # each --sbatch-arg is its own line, read by sbatch as the user wrote it
    assert lines[1 + len(meant):body] == [f"#SBATCH {a}" for a in kw["sbatch_args"]], text
    assert shlex.split(lines[-1]) == [
        "exec", "/opt/py/bin/python", "-m", "kvbench", "run-job", "--job-file",
        f"{array_dir}/jobs/${{SLURM_ARRAY_TASK_ID}}.json", "--results", str(results)]


# ---- secrets -----------------------------------------------------------------------------

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _token(prefix: str, alphabet: str, lo: int, hi: int):
    return st.text(alphabet=alphabet, min_size=lo, max_size=hi).map(lambda t: prefix + t)


# credentials by shape (each provider's documented prefix) and opaque ones, known by name only
SHAPED = st.one_of(_token("hf_", _ALNUM, 20, 40), _token("sk-", _ALNUM + "_-", 16, 48),
                   _token("sk-proj-", _ALNUM, 16, 40), _token("ghp_", _ALNUM, 20, 40),
                   _token("github_pat_", _ALNUM + "_", 20, 60),
                   _token("glpat-", _ALNUM + "_-", 20, 30), _token("xoxb-", _ALNUM + "-", 10, 40),
                   _token("AIza", _ALNUM + "_-", 35, 35))
OPAQUE = st.text(alphabet=_ALNUM + "_-.+/=~", min_size=12, max_size=40).filter(
    lambda t: not t.startswith("-") and any(c.isalnum() for c in t))
SECRET_NAMES = st.tuples(st.from_regex(r"[A-Z][A-Z0-9]{0,8}", fullmatch=True),
                         st.sampled_from(["TOKEN", "API_KEY", "PRIVATE_KEY_PEM", "TOKEN_LIST",
                                          "CRED", "PASSWORD", "SECRET_VALUE", "AUTH",
                                          "ACCESS_TOKEN", "CREDENTIALS_JSON"])
                         ).map(lambda p: f"{p[0]}_{p[1]}")
SECRET_FLAGS = ["--api-key", "--hf-token", "--admin-api-key", "--auth-token", "--password"]


def _doors(draw, secret: str, shaped: bool):
    """(door, what kvbench writes of it, whether the value was hidden by name: remembered,
    so its echo in any spelling is hidden too)."""
    flag = draw(st.sampled_from(SECRET_FLAGS))
    name = draw(SECRET_NAMES)
    argv_head = ["kvbench", draw(st.sampled_from(["run", "replay", "launch", "run-job"]))]
    doors = {
        "flag value": (lambda: redaction.redact_argv([*argv_head, flag, secret]), True),
        "flag=value": (lambda: redaction.redact_argv([*argv_head, f"{flag}={secret}"]), True),
        "engine arg": (lambda: redaction.redact_argv(
            [*argv_head, "--engine-arg", f"{flag} {secret}"]), True),
        "engine arg=": (lambda: redaction.redact_argv(
            [*argv_head, "--engine-arg", f"{flag}={secret}"]), True),
        "engine arg split": (lambda: redaction.redact_argv(
            [*argv_head, "--engine-arg", flag, "--engine-arg", secret]), True),
        "engine arg json": (lambda: redaction.redact_argv(
            [*argv_head, "--engine-arg",
             "--json-model-override-args " + shlex.quote(json.dumps({"api_key": secret}))]),
            True),
        "repeated flag": (lambda: redaction.redact_argv(
            [*argv_head, flag, "x" * 12, flag, secret]), True),
        "environment": (lambda: redaction.redact_env({name: secret, "PATH": "/usr/bin"}), True),
        "json job file": (lambda: redaction.redact_json(
            {"options": {"engine_args": ["--port", "8000", flag, secret]},
             "env": {name: secret}}), True),
        "header": (lambda: redaction.redact_argv(
            [*argv_head, "--header", f"Authorization: Bearer {secret}"]), False),
        "header by name": (lambda: redaction.redact_text(f"X-Api-Key: {secret}"), True),
        # a URL carries its password percent-encoded (RFC 3986 3.2.1: '/' ends the authority)
        "url": (lambda: redaction.redact_text(
            f"https://bob:{urllib.parse.quote(secret, safe='')}@host.example/v1"), False),
        "url query": (lambda: redaction.redact_text(
            f"https://host.example/v1?api_key={secret}&x=1"), False),
        "engine log": (lambda: redaction.redact_text(
            f"server_args=ServerArgs(model_path='m', api_key='{secret}', port=1)"), True),
    }
    if shaped:  # a credential by shape is hidden wherever it stands, whatever holds it
        doors["free text"] = (lambda: redaction.redact_text(f"loaded with {secret} ok"), False)
        doors["opaque flag"] = (lambda: redaction.redact_argv(
            [*argv_head, "--foo", secret]), False)
    door = draw(st.sampled_from(sorted(doors)))
    write, by_name = doors[door]
    return door, write, by_name


def _spellings(secret: str) -> list[str]:
    raw = secret.encode()
    return [secret, base64.b64encode(raw).decode().rstrip("="), raw.hex(), secret[::-1],
            urllib.parse.quote(secret, safe="")]


@settings(SETTINGS, max_examples=400)
@given(data=st.data())
def test_secrets_in_every_spelling_reach_nothing_written(data):
    """A secret (a provider's shape, or opaque and known by its name) at one of kvbench's
    doors, in the spelling drawn (`--flag value`, `--flag=value`, inside --engine-arg, JSON
    in an engine argument, a repeated flag, the environment, a job file, a header, a URL, an
    engine's log): what kvbench would write holds it in no spelling; one hidden by name is
    hidden when a server then echoes it, raw, base64, hex or reversed."""
    redaction._forget_all()  # each case its own process state
    shaped = data.draw(st.booleans())
    secret = data.draw(SHAPED if shaped else OPAQUE)
    door, write, by_name = _doors(data.draw, secret, shaped)
    FIGURES["secret inputs"] += 1
    written = json.dumps(write())
    leaked = [s for s in _spellings(secret) if s in written]
    if leaked:
        FIGURES["secret leaks"] += 1
        raise AssertionError(f"{door}: {secret!r} written as {written}")
    if by_name:
        spelt = data.draw(st.sampled_from(_spellings(secret)))
        echoed = redaction.redact_text(f'{{"echo": "{spelt}", "choices": []}}')
        FIGURES["secret echoes"] += 1
        assert spelt not in echoed, (door, secret, echoed)


# ---- long strings through redaction ------------------------------------------------------

UNITS = ["a", "a:", "https://", "x://a:", "--api-key ", "api_key=", "sk-", "eyJa.",
         "Authorization: bearer ", "a=", "@", '"a":', "-", "hf_", "?token=", "a@b:", "_", ":/",
         "ab-", "'", '"api_key": "', "X-Api-Key:", "%", "\\", "\n"]


@settings(SETTINGS, max_examples=30)
@given(units=st.lists(st.sampled_from(UNITS), min_size=1, max_size=3),
       length=st.sampled_from([20_000, 80_000, 400_000]))
def test_long_adversarial_strings_redact_in_linear_time(units, length):
    """Runs of the pieces every redaction pattern starts or stops at (the issue's 80,000
    characters once cost 4.75 s, 1 MB ran past minutes): a 400,000-character value
    redacts within the alarm, and what comes out stays within a bounded growth."""
    piece = "".join(units)
    text = (piece * (length // len(piece) + 1))[:length]
    FIGURES["long string inputs"] += 1
    with bounded(f"redact {units} x {length}"):
        out = redaction.redact_text(text)
        ident = redaction.redacted_id(text)
    assert len(out) <= len(text) + 16 * text.count("=") + 16 * text.count(":") + 16
    assert ident == text or ident.startswith("redacted-")


# ---- writes into a directory where something was planted -----------------------------------

PLANTS = ["nothing", "stale file", "symlink to a file outside", "symlink to a directory outside",
          "dangling symlink", "symlink loop", "fifo", "directory", "hard link to a file outside"]
OWNED_WRITES = ["write_atomic", "write_json_atomic", "append a line", "append a gz line",
                "remove_own"]


def _plant(kind: str, path: Path, outside: Path) -> None:
    if kind == "stale file":
        path.write_text("stale")
    elif kind == "symlink to a file outside":
        path.symlink_to(outside / "theirs.txt")
    elif kind == "symlink to a directory outside":
        path.symlink_to(outside)
    elif kind == "dangling symlink":
        path.symlink_to(outside / "nowhere" / "x")
    elif kind == "symlink loop":
        path.symlink_to(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "hard link to a file outside":
        os.link(outside / "theirs.txt", path)


def _outside_state(outside: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(outside.iterdir()) if p.is_file()}


@settings(SETTINGS, max_examples=200)
@given(plant=st.sampled_from(PLANTS), write=st.sampled_from(OWNED_WRITES),
       name=st.sampled_from(["result.json", "records.jsonl", "scrape.jsonl.gz",
                             "dashboard.html", "result.orig.json"]))
def test_owned_writes_where_something_was_planted(plant, write, name, tmp_path):
    """A file kvbench owns (a result, records, scrape, dashboard), where a hostile results
    directory planted a link, special file or directory: kvbench writes a regular file of
    its own there, or refuses in one line naming the path; nothing outside changes, and
    what was planted is never replaced."""
    from kvbench import files
    from kvbench.errors import OutputError

    root = Path(tempfile.mkdtemp(dir=tmp_path))
    outside = root / "outside"
    outside.mkdir()
    (outside / "theirs.txt").write_text("theirs")
    if write == "append a gz line" and not name.endswith(".gz"):
        name += ".gz"
    path = root / "job" / name
    path.parent.mkdir()
    _plant(plant, path, outside)
    before = _outside_state(outside)
    FIGURES["planted inputs"] += 1

    def do():
        if write == "write_atomic":
            files.write_atomic(path, "ours")
        elif write == "write_json_atomic":
            files.write_json_atomic(path, {"ours": 1})
        elif write == "remove_own":
            files.remove_own(path)
        else:
            with files.JsonlWriter(path) as w:
                w.write({"ours": 1})

    # a hard link is a regular file: replacing or removing its name leaves the other name's
    # file as it was; appending would write into it
    regular = ("nothing", "stale file") + (
        () if write.startswith("append") else ("hard link to a file outside",))
    try:
        with bounded(f"{write} over {plant}"):
            do()
    except OutputError as e:
        FIGURES["planted clean errors"] += 1
        assert "\n" not in e.message and str(path.parent) in e.message, str(e)
        assert plant not in regular, str(e)  # kvbench's own files: written
        assert os.path.lexists(path)  # left as it was found
    else:
        FIGURES["planted written"] += 1
        assert plant in regular, f"{write} went through a {plant}"
    assert _outside_state(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["theirs.txt"]


# ---- edits of a user's YAML spelt with anchors, aliases and merge keys --------------------

MIRROR_KEY = "qwen3.5-fp8-mi325x-sglang-agentic-mtp"  # five resident rows, no offload arm


@pytest.fixture(scope="module")
def mirror_input() -> str:
    """The key's block of the real AMD master file."""
    from fixtures.inferencex import INFERENCEX

    lines = (INFERENCEX / "amd-master.yaml").read_text().split("\n")
    start = next(n for n, line in enumerate(lines) if line.startswith(f"{MIRROR_KEY}:"))
    end = next(n for n in range(start + 1, len(lines))
               if lines[n] and not lines[n][0].isspace() and not lines[n].startswith("#"))
    return "\n".join(lines[start:end]).rstrip("\n") + "\n"


def _spell_with_anchors(draw, text: str) -> str:
    """`text` (one key) with anchors on some of its rows, their lists or scalars, or its own
    scalars, and aliases or merge keys that use them: in the key's own rows, or in a second
    key (a copy of the first) that shares them."""
    lines = text.split("\n")
    other = [lines[0].replace(":", "-b:", 1), *lines[1:]]
    rows = [n for n, line in enumerate(lines) if line.startswith("      - { tp:")]
    uses: list[str] = []
    # half the cases anchor nothing in the key's rows (only its scalars)
    anchored = [] if draw(st.integers(0, 99)) < 50 else draw(st.lists(
        st.sampled_from(rows), unique=True, min_size=1, max_size=3))
    for i, n in enumerate(anchored):
        where = draw(st.sampled_from(["row", "conc-list", "tp"]))
        if where == "row":
            lines[n] = lines[n].replace("- {", f"- &r{i} {{", 1)
            uses.append(draw(st.sampled_from([f"*r{i}", f"{{ <<: *r{i}, conc-list: [2] }}"])))
        elif where == "conc-list":
            lines[n] = lines[n].replace("conc-list: [", f"conc-list: &c{i} [", 1)
            uses.append(f"{{ tp: 8, kv-offloading: none, conc-list: *c{i} }}")
        else:
            lines[n] = lines[n].replace("{ tp: ", f"{{ tp: &t{i} ", 1)
            uses.append(f"{{ tp: *t{i}, kv-offloading: none, conc-list: [1] }}")
    for n, (field, name) in enumerate((("image", "img"), ("model", "m")), start=1):
        if draw(st.booleans()):
            lines[n] = lines[n].replace(f"{field}: ", f"{field}: &{name} ", 1)
            other[n] = f"  {field}: *{name}"
    for use in uses:
        into = lines if draw(st.booleans()) else other
        last = max(n for n, line in enumerate(into) if line.startswith("      - "))
        into.insert(last + 1, f"      - {use}")
    text = "\n".join(lines).rstrip("\n") + "\n"
    shares = any("*" in line for line in other)
    return text + ("\n".join(other).rstrip("\n") + "\n" if shares or draw(st.booleans())
                   else "")


@settings(SETTINGS, max_examples=50)
@given(data=st.data())
def test_mirror_edits_yaml_spelt_with_anchors(data, mirror_input, tmp_path, capsys):
    """A master file whose rows, lists or scalars are anchors used elsewhere (aliases, merge
    keys), through `kvbench recipe mirror`: refused in one line with the reason (the file
    untouched), or only its twins written: every line of the user's file stays, every other
    key reads as before, every row of the key is still there, and each twin it says it
    added is."""
    import shutil

    import yaml
    from fixtures.inferencex import INFERENCEX

    from kvbench.cli import main

    spelt = _spell_with_anchors(data.draw, mirror_input)
    configs = Path(tempfile.mkdtemp(dir=tmp_path)) / "configs"
    configs.mkdir()
    shutil.copyfile(INFERENCEX / "runners.yaml", configs / "runners.yaml")
    (master := configs / "master.yaml").write_text(spelt)
    FIGURES["yaml edit inputs"] += 1
    try:
        main(["recipe", "mirror", "--config-keys", MIRROR_KEY, "--config-files", str(master),
              "--no-changelog"])
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    if code:
        FIGURES["yaml edit clean errors"] += 1
        first = err.splitlines()[0]
        assert code == 2 and first.startswith("error: ") and any(w in first for w in (
            "anchor", "alias", "merge", "does not validate")), err
        assert master.read_text() == spelt
        return
    FIGURES["yaml edit written"] += 1
    written = master.read_text()
    kept = iter(written.split("\n"))
    assert all(line in kept for line in spelt.split("\n")), "a line of the file was changed"
    old, new = yaml.safe_load(spelt), yaml.safe_load(written)
    assert {k: v for k, v in new.items() if k != MIRROR_KEY} == {
        k: v for k, v in old.items() if k != MIRROR_KEY}
    rows_old = old[MIRROR_KEY]["scenarios"]["agentic-coding"][0]["search-space"]
    rows = iter(rows_new := new[MIRROR_KEY]["scenarios"]["agentic-coding"][0]["search-space"])
    assert all(row in rows for row in rows_old), "a row was lost or changed"
    assert len(rows_new) == len(rows_old) + out.count("\nadded ") + out.startswith("added ")


def test_zz_figures(capsys):
    """The file's figures (run last: tests run in file order)."""
    tried = sum(v for k, v in FIGURES.items() if k.endswith("inputs"))
    with capsys.disabled():
        print("\nwritten: " + ", ".join(f"{k} {v}" for k, v in sorted(FIGURES.items())))
    if tried == 0:
        pytest.skip("run with the rest of tests/fuzz/test_written.py for the figures")
    assert FIGURES["secret leaks"] == 0
