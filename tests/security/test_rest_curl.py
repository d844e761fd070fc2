"""Issue 35, item 8: the REST webhook takes the documented ``curl -XPOST ... -d '{...}'`` (sent
as a form, without a JSON content type), as Rasa does; a browser's request still needs a
declared JSON body, and a foreign origin is still refused."""

from __future__ import annotations

import json

from subagents.testing import FakeModelServer

from tests.security.served import served, served_project

BODY = json.dumps({"sender": "curl-user", "message": "hours?"}).encode()


async def test_the_documented_curl_gets_an_answer(tmp_path, tools_url):
    async with FakeModelServer({"command_generator": ["start flow opening_hours"]}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url)
        async with served(project) as (server, client):
            as_curl = await client.post("/webhooks/rest/webhook", content=BODY, headers={
                "content-type": "application/x-www-form-urlencoded"})
            bare = await client.post("/webhooks/rest/webhook", content=b"not json")
            page_form = await client.post("/webhooks/rest/webhook", content=BODY, headers={
                "content-type": "text/plain", "origin": server.url})
            foreign = await client.post("/webhooks/rest/webhook", content=BODY, headers={
                "content-type": "text/plain", "origin": "https://evil.example"})
    assert as_curl.status_code == 200, as_curl.text
    assert as_curl.json()[0] == {"recipient_id": "curl-user", "text": "We are open 9 to 5."}
    assert bare.status_code == 400
    assert (page_form.status_code, page_form.json()["code"]) == (
        415, "http.unsupported_media_type")
    assert (foreign.status_code, foreign.json()["code"]) == (403, "http.origin_forbidden")
