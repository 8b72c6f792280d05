"""Output files the user names are created new: an existing file, any symlink (dangling
or not), a missing folder and one path given twice are refused, with the option and the
path named; nothing is written through a link."""

from __future__ import annotations

import pytest

from diag.format.outfile import OutputFileError, check_new, write_new


def test_writes_a_new_file(tmp_path):
    write_new("--html", tmp_path / "r.html", "<p>ok</p>")
    assert (tmp_path / "r.html").read_text() == "<p>ok</p>"


def test_an_existing_file_is_kept(tmp_path):
    mine = tmp_path / "r.html"
    mine.write_text("mine")
    for call in (lambda: check_new({"--html": mine}), lambda: write_new("--html", mine, "x")):
        with pytest.raises(OutputFileError, match="already exists"):
            call()
    assert mine.read_text() == "mine"


def test_a_dangling_symlink_is_not_followed(tmp_path):
    link, target = tmp_path / "r.html", tmp_path / "sub" / "target.html"
    target.parent.mkdir()
    link.symlink_to(target)
    with pytest.raises(OutputFileError, match="--html .*symlink"):
        check_new({"--html": link})
    with pytest.raises(OutputFileError, match="symlink"):
        write_new("--html", link, "x")  # O_EXCL|O_NOFOLLOW, as if the link came after the check
    assert not target.exists() and link.is_symlink()


def test_a_symlink_to_a_file_is_not_followed(tmp_path):
    link, target = tmp_path / "t.json", tmp_path / "mine.json"
    target.write_text("mine")
    link.symlink_to(target)
    with pytest.raises(OutputFileError, match="symlink"):
        write_new("--trace", link, "{}")
    assert target.read_text() == "mine"


def test_a_missing_folder_is_named(tmp_path):
    missing = tmp_path / "missing-dir"
    with pytest.raises(OutputFileError, match=f"--trace .*{missing}: no such folder"):
        check_new({"--html": None, "--trace": missing / "t.json"})
    with pytest.raises(OutputFileError, match="no such folder"):
        write_new("--trace", missing / "t.json", "{}")
    assert not missing.exists()


def test_a_file_where_the_folder_should_be(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputFileError, match="is not a folder"):
        check_new({"--html": tmp_path / "f" / "r.html"})


def test_one_path_for_two_options_is_refused(tmp_path):
    (tmp_path / "sub").mkdir()
    with pytest.raises(OutputFileError, match="--html and --trace both name"):
        check_new({"--html": tmp_path / "x", "--trace": tmp_path / "sub" / ".." / "x"})
    check_new({"--html": tmp_path / "x", "--trace": tmp_path / "y", "--other": None})
