"""The command generator's transcript never shows an OAuth sign-in address."""

from __future__ import annotations

from subagents.dialogue.understanding import transcript

LINK = ("https://auth.example/authorize?response_type=code&client_id=c&state=s3cr3t"
        "&code_challenge=abc&code_challenge_method=S256")


def test_a_sign_in_link_reads_as_a_placeholder_and_other_links_stay():
    events = [{"event": "user", "text": "my calendar?"},
              {"event": "bot", "text": f"Open this link to continue: {LINK}",
               "metadata": {"agent_name": "calendar_agent"}},
              {"event": "bot", "text": "See https://example.com/help for more."}]
    lines = transcript(events, 10).splitlines()
    assert lines[1] == "calendar_agent: Open this link to continue: [sign-in link]"
    assert lines[2] == "AI: See https://example.com/help for more."
    assert "s3cr3t" not in "\n".join(lines)
