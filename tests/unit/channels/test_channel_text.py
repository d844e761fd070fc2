"""Splitting long bot texts for platforms with a message size limit."""

from __future__ import annotations

from subagents.channels.input import RecentIds, buttons_as_text, split_text


def test_short_texts_stay_whole():
    assert split_text("  Hello there.  ", 20) == ["Hello there."]
    assert split_text("   ", 20) == []


def test_long_texts_split_at_sentence_boundaries():
    text = "One two three. Four five six! Seven eight nine? Ten."
    assert split_text(text, 30) == ["One two three. Four five six!", "Seven eight nine? Ten."]
    assert split_text("First paragraph\n\nSecond one here", 20) == ["First paragraph",
                                                                      "Second one here"]


def test_a_sentence_longer_than_the_limit_is_cut_at_a_space_or_hard():
    assert split_text("aaaa bbbb cccc dddd.", 10) == ["aaaa bbbb", "cccc dddd."]
    assert split_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    assert all(len(p) <= 7 for p in split_text("word " * 40, 7))


def test_choices_as_numbered_text_and_replay_memory():
    buttons = [{"title": "Yes", "payload": "/yes"}, {"title": "No", "payload": "/no"}]
    assert buttons_as_text("Continue?", buttons) == "Continue?\n1. Yes\n2. No"
    seen = RecentIds(size=2)
    assert [seen.seen(x) for x in ("a", "a", "b", "c", "a")] == [False, True, False, False,
                                                                 False]
