"""kvbench's layout rules (named warnings; `check_change` refuses them) on the real InferenceX
file and on mutations of it. CI's gate itself is tested against its recordings
(test_ci_gate.py)."""

from __future__ import annotations

import pytest
from changelog.conftest import NEW_ENTRY, append, split_at

from kvbench.changelog import check_change, parse_changelog, style_report
from kvbench.errors import ChangelogError


def problems(base: bytes, head: bytes, keys: set[str], **kw) -> list[str]:
    """Every rule broken, as 'name: message' (as `check_change` lists them when it refuses)."""
    with pytest.raises(ChangelogError) as exc:
        check_change(base, head, keys, **kw)
    return exc.value.errors[1:]


def one_problem(base: bytes, head: bytes, keys: set[str], needle: str, **kw) -> str:
    found = problems(base, head, keys, **kw)
    assert len(found) == 1, found
    assert needle in found[0], found[0]
    return found[0]


def test_real_file_parses_whole(real_raw):
    parsed = parse_changelog(real_raw)
    assert len(parsed.entries) == 772
    assert parsed.entries[-1].config_keys == ["dsv4-fp4-b200-vllm-agentic-mtp"]
    assert parsed.start_lines[0] == 1


def test_real_last_two_entries_are_a_valid_change(base_raw, real_raw, known_keys):
    report = check_change(base_raw, real_raw, known_keys)
    assert report.base_count == 770
    assert [e.pr_link.rsplit("/", 1)[1] for e in report.new_entries] == ["2685", "2707"]
    assert report.corrections == []


def test_real_whitespace_separator_of_pr_2663_is_caught(real_raw, known_keys):
    # PR 2663 really appended a whitespace-only line and two separators; the reference
    # pipeline's main() did not check the layout, so it slipped in.
    found = problems(split_at(real_raw, 769), real_raw, known_keys)
    assert found == ["whitespace-separator: head:6352: whitespace-only line; a separator line "
                     "must be empty",
                     "separator-blank-lines: head:6354: 2 blank lines before this entry; "
                     "separate entries with exactly one empty line"]


def test_unchanged_file_has_no_new_entries(real_raw, known_keys):
    assert check_change(real_raw, real_raw, known_keys).new_entries == []


def test_new_file_from_nothing(known_keys):
    report = check_change(b"", NEW_ENTRY.encode(), known_keys)
    assert len(report.new_entries) == 1


def test_appended_entry_with_glob(real_raw, known_keys):
    entry = NEW_ENTRY.replace("dsv4-fp4-b200-vllm-agentic-mtp", "dsv4-fp4-*-agentic*")
    report = check_change(real_raw, append(real_raw, entry), known_keys)
    assert report.new_entries[0].config_keys == ["dsv4-fp4-*-agentic*"]


def test_deleted_entry(base_raw, known_keys):
    shorter = split_at(base_raw, 700)
    one_problem(base_raw, shorter, known_keys, "entries-deleted: head has 700 entries")


def test_modified_historical_description(real_raw, known_keys):
    head = real_raw.replace(b"6-7% uplift for llama", b"7-8% uplift for llama", 1)
    msg = one_problem(real_raw, head, known_keys, "historical entry 0 was modified")
    assert msg.startswith("history-modified: ") and "description" in msg and "head:1:" in msg


def test_placeholder_pr_link_correction(real_raw, known_keys):
    head = real_raw.replace(b"/pull/XXX", b"/pull/2390", 1)
    report = check_change(real_raw, head, known_keys)
    assert report.corrections == [690]
    assert report.new_entries == []


def test_correction_mixed_with_addition(real_raw, known_keys):
    head = append(real_raw.replace(b"/pull/XXX", b"/pull/2390", 1))
    one_problem(real_raw, head, known_keys, "is mixed with new entries")


def test_canonical_pr_link_is_immutable(real_raw, known_keys):
    head = real_raw.replace(b"/pull/2707\n", b"/pull/2708\n", 1)
    one_problem(real_raw, head, known_keys, "changed from the canonical")


def test_correction_to_a_non_canonical_link(real_raw, known_keys):
    head = real_raw.replace(b"/pull/XXX", b"/pull/2390/files", 1)
    one_problem(real_raw, head, known_keys, "not canonical either")


@pytest.mark.parametrize("link", ["https://github.com/other/repo/pull/12", "pull 2800",
                                  "https://github.com/SemiAnalysisAI/InferenceX/pull/2800/changes"])
def test_new_entry_pr_link_format(real_raw, known_keys, link):
    entry = NEW_ENTRY.replace("https://github.com/SemiAnalysisAI/InferenceX/pull/2800", link)
    msg = one_problem(real_raw, append(real_raw, entry), known_keys, "must be https://github.com")
    assert repr(link) in msg


def test_new_entry_placeholder_is_allowed(real_raw, known_keys):
    entry = NEW_ENTRY.replace("/pull/2800", "/pull/XXX")
    assert len(check_change(real_raw, append(real_raw, entry), known_keys).new_entries) == 1


def test_pr_number_must_match(real_raw, known_keys):
    head = append(real_raw)
    one_problem(real_raw, head, known_keys, "must name this PR (2801)", pr_number=2801)
    assert check_change(real_raw, head, known_keys, pr_number=2800).new_entries


def test_unknown_config_key_names_close_ones(real_raw, known_keys):
    entry = NEW_ENTRY.replace("dsv4-fp4-b200-vllm-agentic-mtp", "dsv4-fp4-b200-vlm-agentic-mtp")
    msg = one_problem(real_raw, append(real_raw, entry), known_keys, "matches no config key")
    assert "close: dsv4-fp4-b200-vllm-agentic-mtp" in msg


def test_glob_matching_nothing(real_raw, known_keys):
    entry = NEW_ENTRY.replace("dsv4-fp4-b200-vllm-agentic-mtp", "llama-*")
    one_problem(real_raw, append(real_raw, entry), known_keys, "pattern 'llama-*' matches no")


@pytest.mark.parametrize(("sep", "needle"), [
    ("", "0 blank lines before this entry"),
    ("\n\n", "2 blank lines before this entry"),
    ("  \n", "whitespace-only line"),
])
def test_separator_is_exactly_one_blank_line(real_raw, known_keys, sep, needle):
    found = problems(real_raw, append(real_raw, sep=sep), known_keys)
    assert any(needle in p for p in found), found


def test_blank_line_inside_a_new_entry(real_raw, known_keys):
    entry = NEW_ENTRY.replace("  description:", "\n  description:")
    one_problem(real_raw, append(real_raw, entry), known_keys, "blank line inside an entry")


def test_two_new_entries_need_one_blank_between(real_raw, known_keys):
    two = NEW_ENTRY + "\n" + NEW_ENTRY.replace("2800", "2801")
    assert len(check_change(real_raw, append(real_raw, two), known_keys).new_entries) == 2
    glued = NEW_ENTRY + NEW_ENTRY.replace("2800", "2801")
    one_problem(real_raw, append(real_raw, glued), known_keys, "0 blank lines before this entry")


def test_final_newline(real_raw, known_keys):
    one_problem(real_raw, append(real_raw).rstrip(b"\n"), known_keys, "no final newline")
    one_problem(real_raw, append(real_raw) + b"\n", known_keys, "blank line(s) at the end")


@pytest.mark.parametrize(("bad", "needle"), [("\t", "a tab"), ("\r", "carriage return")])
def test_tabs_and_cr(real_raw, known_keys, bad, needle):
    entry = NEW_ENTRY.replace("Raise the", f"Raise{bad}the")
    found = problems(real_raw, append(real_raw, entry), known_keys)
    assert any(needle in p for p in found), found


def test_duplicate_key(real_raw, known_keys):
    entry = NEW_ENTRY + "  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/2801\n"
    found = problems(real_raw, append(real_raw, entry), known_keys)
    assert any("duplicate key 'pr-link'" in p for p in found), found


def test_missing_description_and_unknown_field(real_raw, known_keys):
    entry = NEW_ENTRY.replace("  description:\n    - \"Raise the TP8 concurrency list.\"\n",
                              "  notes: hi\n")
    found = problems(real_raw, append(real_raw, entry), known_keys)
    assert any("description: Field required" in p for p in found), found
    assert any("notes: Extra inputs are not permitted" in p for p in found), found


def test_bad_scenario_type(real_raw, known_keys):
    entry = NEW_ENTRY.replace("    - agentic-coding\n", "    - agentic\n")
    found = problems(real_raw, append(real_raw, entry), known_keys)
    assert any("scenario-type" in p and "agentic-coding" in p for p in found), found


def test_entry_must_start_with_config_keys(real_raw, known_keys):
    entry = ("- description:\n    - x\n  config-keys:\n    - dsv4-fp4-b200-vllm-agentic-mtp\n"
             "  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/2800\n")
    found = problems(real_raw, append(real_raw, entry), known_keys)
    assert any("must start with '- config-keys:'" in p for p in found), found


def test_insertion_in_the_middle_is_named_as_such(real_raw, known_keys):
    parsed = parse_changelog(real_raw)
    lines = real_raw.split(b"\n")
    at = parsed.start_lines[5] - 1
    head = b"\n".join([*lines[:at], NEW_ENTRY.encode().rstrip(b"\n"), b"", *lines[at:]])
    msg = one_problem(real_raw, head, known_keys, "new entry 5 sits between historical entries")
    assert msg.startswith(f"inserted-mid-file: head:{at + 1}:")
    assert [e.pr_link[-4:] for e in style_report(real_raw, head, known_keys).new_entries] == [
        "2800"]


def test_comment_edit_is_not_append(real_raw, known_keys):
    head = real_raw.replace(b"\n\n- config-keys:", b"\n# note\n\n- config-keys:", 1)
    one_problem(real_raw, head, known_keys, "does not start with the base file byte for byte")


def test_append_only_with_evals(real_raw, known_keys):
    entry = NEW_ENTRY + "  append-only: true\n  evals-only: true\n"
    one_problem(real_raw, append(real_raw, entry), known_keys, "append-only cannot be combined")


def test_a_base_without_its_final_newline_is_not_the_changes_fault(real_raw, known_keys):
    report = style_report(real_raw[:-1], real_raw, known_keys)
    assert report.warnings == [] and report.new_entries == []


def test_all_problems_reported_at_once(real_raw, known_keys):
    entry = NEW_ENTRY.replace("dsv4-fp4-b200-vllm-agentic-mtp", "nope").replace(
        "/pull/2800", "/pulls/2800")
    found = problems(real_raw, append(real_raw, entry, sep="\n\n"), known_keys)
    assert len(found) == 3, found
