"""The validation layer: everything the runtime interprets is parsed and cross-checked at load.

Conditions (flow guards, ``next`` conditions, ``exit_if``, collect rejections, response
conditions), templates (prompt templates, Jinja responses, ``{slot}`` placeholders) and
references (slots, responses, actions, flows, agents, MCP servers, model groups) are checked here,
once, so a mistake is a ``validate`` error with file, line, key and code instead of a silent
``false`` or a raw template in the middle of a conversation.

References to something that is itself broken (a flow whose definition failed to load, an agent
whose config has errors, a model group with an invalid model) are not reported again: one bad
value gives one error.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subagents._yaml import Loc, YamlDoc
from subagents.conditions import Condition, ConditionSyntaxError, parse_condition
from subagents.config.domain import MAPPING_TYPES, Domain, ResponseVariation
from subagents.config.flows import END, Flow, Step
from subagents.config.sub_agent import SubAgentConfig
from subagents.exceptions import ConfigIssue

BUILTIN_ACTIONS = frozenset({
    "action_listen", "action_restart", "action_session_start", "action_default_fallback",
    "action_deactivate_loop", "action_revert_fallback_events", "action_default_ask_affirmation",
    "action_default_ask_rephrase", "action_two_stage_fallback", "action_unlikely_intent",
    "action_back", "action_extract_slots", "action_send_text", "action_send_text_update",
    "action_agent_request_user_input", "action_cancel_flow", "action_correct_flow_slot",
    "action_clarify_flows", "action_run_slot_rejections", "action_clean_stack",
    "action_trigger_search", "action_trigger_chitchat", "action_reset_routing", "action_hangup",
    "action_handoff_metric", "action_repeat_bot_messages", "action_default_capabilities",
    "action_continue_interrupted_flow", "action_cancel_interrupted_flows",
    "action_cancel_interrupted_flow", "action_block_digression",
})
"""Actions every project may use without defining them (Rasa's default action set)."""
BUILTIN_SLOTS = frozenset({
    "requested_slot", "continue_interrupted_flow_confirmation", "flow_hashes",
    "session_started_metadata", "mocked_datetime", "dialogue_stack", "return_value",
    "slot_to_confirm", "confirm_slot", "language"})
"""Slots that exist in every project, beyond the default domain's."""
ALWAYS_LINKABLE = frozenset({"pattern_human_handoff", "pattern_search",
                             "pattern_customer_satisfaction"})
AGENT_PROMPT_VARIABLES = frozenset({
    "description", "user_message", "slots", "slot_names", "conversation_history",
    "recipient_id", "current_datetime", "enable_filler_messages", "resumed_after_interruption",
    "resumed_last_request", "restarted", "agent_name", "tools"})
"""Variables a sub agent's prompt template receives."""
COMMAND_GENERATOR_VARIABLES = frozenset({
    "available_flows", "current_conversation", "flow_slots", "current_flow", "current_slot",
    "current_slot_description", "current_slot_type", "current_slot_allowed_values",
    "user_message", "active_agent", "completed_agents", "current_datetime"})
"""Variables a command generator's custom prompt template receives (as in Rasa)."""
REPHRASER_VARIABLES = frozenset({"history", "current_input", "suggested_response", "slots",
                                 "language"})
"""Variables the response rephraser's prompt template receives (as in Rasa)."""
RESPONSE_JINJA_NAMES = frozenset({"context", "value", "slots"})
_PLACEHOLDER = re.compile(r"(?<!\{)\{([^\n{}]+?)\}(?!\})")
"""``{name}``; ``{{name}}`` is a literal ``{name}`` in Rasa's format interpolation."""
_INTERPOLATED_KEYS = ("text", "image", "custom", "buttons", "attachment", "quick_replies")


@dataclass
class Broken:
    """Names whose definition failed to load: references to them are not reported again."""

    flows: set[str] = field(default_factory=set)
    agents: set[str] = field(default_factory=set)
    model_groups: set[str] = field(default_factory=set)
    mcp_servers: set[str] = field(default_factory=set)
    slots: set[str] = field(default_factory=set)
    responses: set[str] = field(default_factory=set)
    unreadable_data: bool = False
    """A domain or data file could not be read: any name might have been defined there."""


SEARCH_STEP_WITHOUT_POLICY = "flow.action.search_unsupported"
"""An ``action_trigger_search`` step in a project whose config.yml has no search policy."""
UNSUPPORTED_ACTIONS = {
    "action_trigger_search": (
        SEARCH_STEP_WITHOUT_POLICY, "enterprise search is not configured: this step says "
        "utter_no_knowledge_base", "add EnterpriseSearchPolicy to the policies of config.yml "
        "(see docs/knowledge-search.md), or answer with a sub agent that has a search tool"),
    "action_trigger_chitchat": (
        "flow.action.intentless_unsupported", "the intentless policy is not supported: this "
        "step gives no answer", "answer with a response, e.g. utter_free_chitchat_response"),
}
"""Built-in actions that hand over to a policy subagents does not have."""


PREVIOUS_FLOW_NAME = "context.previous_flow_name"


def flow_ids_for_names(condition: Condition, flows: Mapping[str, Flow]) -> list[tuple[str, str]]:
    """``(id, readable name)`` of each flow whose id ``condition`` compares
    ``context.previous_flow_name`` with, where the id is not also the flow's readable name.

    ``pattern_completed`` gets the readable name of the flow that ended (``name:``, else the id
    with spaces), as in Rasa, so such a comparison never holds.
    """
    found = []
    for value in condition.compared_values(PREVIOUS_FLOW_NAME):
        flow = flows.get(value) if isinstance(value, str) else None
        if flow is not None and flow.name != value:
            found.append((flow.id, flow.name))
    return found


def previous_flow_name_message(flow_id: str, name: str) -> tuple[str, str]:
    """Message and hint for a comparison of ``context.previous_flow_name`` with a flow id."""
    return (f"context.previous_flow_name holds a flow's readable name ({name!r}), never its "
            f"id {flow_id!r}: this comparison never holds (in Rasa neither)",
            f"compare with {name!r}")


def unfillable_exit_slots(conditions: Iterable[Condition], domain: Domain,
                          config: SubAgentConfig) -> list[str]:
    """Slots an ``exit_if`` reads that the built-in task agent can never fill.

    As in Rasa 3.21, the agent gets a ``set_slot_<slot>`` tool only for slots whose mappings let
    the model fill them (no mappings, or a ``from_llm`` one); a tool's ``outputs_to_state`` can
    fill a slot too. An agent with its own class (``configuration.module``) may fill slots its
    own way, so none are reported for it.
    """
    if config.configuration.module:
        return []
    from_tools = {slot for settings in config.configuration.tools.values()
                  for slot in settings.outputs_to_state}
    names: list[str] = []
    for condition in conditions:
        for name in condition.slot_names:
            definition = domain.slots.get(name)
            if definition is not None and not definition.llm_fillable() and \
                    name not in from_tools and name not in names:
                names.append(name)
    return names


def slot_problems(raw_slots: Any) -> list[tuple[Loc, str, str, str | None, str]]:
    """Problems in a domain file's ``slots`` the model does not catch:
    ``(loc, code, message, hint, severity)`` each."""
    problems: list[tuple[Loc, str, str, str | None, str]] = []
    for name, definition in (raw_slots or {}).items() if isinstance(raw_slots, dict) else []:
        if not isinstance(definition, dict):
            continue
        kind = definition.get("type")
        if isinstance(kind, str) and "." in kind:
            problems.append((("slots", name, "type"), "domain.slot.custom_type",
                             f"custom slot class {kind!r} is not loaded: the slot keeps values "
                             "as they are (type any)", None, "warning"))
        mappings = definition.get("mappings")
        for index, mapping in enumerate(mappings if isinstance(mappings, list) else []):
            kind = mapping.get("type") if isinstance(mapping, dict) else None
            if kind not in MAPPING_TYPES:
                problems.append((
                    ("slots", name, "mappings", index, "type"), "domain.slot.unknown_mapping_type",
                    f"unknown slot mapping type {kind!r}",
                    did_you_mean(str(kind), MAPPING_TYPES, "use one of " + ", ".join(
                        MAPPING_TYPES)), "error"))
    return problems


_QUOTED = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|\{\{.*?\}\}|\{%.*?%\}", re.S)
_DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\.[A-Za-z_]")


def unknown_reference(issues: list[ConfigIssue], doc: YamlDoc, text: str, loc: Loc,
                      code: str = "flow.condition.unknown_reference") -> None:
    """A condition sees ``slots.<name>`` and ``context.<field>`` only; any other dotted name
    (``slot.city``, ``slots_city.x``) is always empty, so it is reported."""
    for root in _DOTTED.findall(_QUOTED.sub('""', text)):
        if root not in ("slots", "context"):
            issues.append(doc.issue(
                code, f"{root}.… is neither slots.<name> nor context.<field>: it is always empty",
                loc, hint=did_you_mean(root, ("slots", "context"),
                                       "conditions see slots.<name> and context.<field>")))
            return


def unquoted_words(issues: list[ConfigIssue], doc: YamlDoc, cond: Condition, loc: Loc,
                   code: str = "flow.condition.unquoted_word") -> None:
    """``slots.city = Berlin`` compares with a name ``Berlin``, which is always empty: warn, with
    the quoted form as the fix."""
    for word in cond.bare_words:
        issues.append(doc.issue(
            code, f"{word} is not in quotes, so it reads as a name, and a name other than "
            "slots.<name> or context.<field> is always empty", loc,
            hint=f"write '{word}' (in quotes) to compare with the text", severity="warning"))


def did_you_mean(name: str, candidates: Iterable[str], fallback: str | None = None) -> str | None:
    """``did you mean 'x'?`` for the closest candidate, else ``fallback``."""
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.75)
    return f"did you mean {close[0]!r}?" if close else fallback


def project_file(root: Path, rel: str) -> Path | None:
    """``rel`` resolved against the project folder, or None when it points outside of it."""
    base = root.resolve()
    path = (base / rel).resolve()
    return path if path == base or base in path.parents else None


class TemplateChecker:
    """Checks Jinja prompt templates: inside the project, readable, parseable, known variables."""

    def __init__(self, root: Path, issues: list[ConfigIssue]) -> None:
        self.root = root
        self.issues = issues

    def rel(self, path: Path) -> str:
        """``path`` relative to the project folder when it is inside it, else as given."""
        try:
            return str(path.relative_to(self.root.resolve()))
        except ValueError:
            return str(path)

    def check(self, doc: YamlDoc, loc: Loc, template: str, variables: frozenset[str], *,
              code_prefix: str, unknown_severity: str = "error") -> None:
        """Report every problem of the template file ``template`` referenced at ``loc``."""
        from jinja2 import TemplateSyntaxError, meta
        from jinja2.sandbox import SandboxedEnvironment

        path = project_file(self.root, template)
        if path is None:
            self.issues.append(doc.issue(
                f"{code_prefix}.prompt_template_outside_project",
                f"prompt template {template!r} is outside the project folder", loc,
                hint="keep templates inside the project; paths are relative to it"))
            return
        if not path.is_file():
            self.issues.append(doc.issue(
                f"{code_prefix}.optional.prompt_template_error",
                f"prompt template file {template!r} does not exist", loc,
                hint="paths are relative to the project folder"))
            return
        text = path.read_text(encoding="utf-8")
        env = SandboxedEnvironment()
        env.filters["to_json_escaped_string"] = str  # registered for prompt templates at run time
        try:
            ast = env.parse(text)
            names = meta.find_undeclared_variables(ast)  # also fails on an unknown filter
        except TemplateSyntaxError as exc:
            self.issues.append(ConfigIssue(
                f"{code_prefix}.prompt_template_syntax_error",
                f"template syntax error: {exc.message}", file=self.rel(path), line=exc.lineno,
                key=_dotted_key(loc), hint="fix the Jinja2 syntax"))
            return
        unknown = sorted(names - variables - set(env.globals))
        if unknown:
            self.issues.append(ConfigIssue(
                f"{code_prefix}.prompt_template_unknown_variable",
                f"template uses unknown variable(s) {', '.join(unknown)}", file=self.rel(path),
                line=_first_line_with(text, unknown[0]), key=_dotted_key(loc),
                hint="available: " + ", ".join(sorted(variables)), severity=unknown_severity))


def _dotted_key(loc: Loc) -> str:
    return ".".join(str(p) for p in loc)


def _first_line_with(text: str, needle: str) -> int | None:
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number
    return None


class FlowChecker:
    """Cross-checks flows against the domain, the other flows, agents and endpoints."""

    def __init__(self, issues: list[ConfigIssue], domain: Domain, flows: dict[str, Flow],
                 docs: dict[str, YamlDoc], agents: Mapping[str, SubAgentConfig],
                 mcp_servers: Iterable[str], broken: Broken) -> None:
        self.issues = issues
        self.domain = domain
        self.flows = flows
        self.docs = docs
        self.agents = set(agents)
        self.agent_configs = dict(agents)
        self.mcp_servers = set(mcp_servers)
        self.broken = broken
        self.uttered: dict[str, tuple[YamlDoc, Loc, bool]] = {}
        """Responses a flow utters: where, and whether ``value`` is passed (rejections)."""

    def slot_known(self, name: str) -> bool:
        """Whether ``name`` is a slot, or might be one defined in a file that failed to load."""
        return name in self.domain.slots or name in BUILTIN_SLOTS or \
            name in self.broken.slots or self.broken.unreadable_data

    def response_known(self, name: str) -> bool:
        """Whether ``name`` is a response, or might be one defined in a file that failed to load."""
        return name in self.domain.responses or name in self.broken.responses or \
            self.broken.unreadable_data

    def flow_known(self, name: str) -> bool:
        """Whether ``name`` is a flow, or might be one defined in a file that failed to load."""
        return name in self.flows or name in self.broken.flows or self.broken.unreadable_data

    def slot_hint(self, name: str) -> str | None:
        """A did-you-mean hint for an unknown slot name."""
        return did_you_mean(name, self.domain.slots, "add it under slots: in the domain")

    def response_hint(self, name: str) -> str | None:
        """A did-you-mean hint for an unknown response name."""
        return did_you_mean(name, self.domain.responses,
                            "add it under responses: in the domain")

    def check_all(self) -> None:
        """Check every flow: description, guard, NLU triggers and steps."""
        triggers: dict[str, str] = {}
        for flow_id, flow in self.flows.items():
            doc = self.docs[flow_id]
            if not flow.description.strip() and not flow_id.startswith("pattern_"):
                self.issues.append(doc.issue(
                    "flow.description.missing", f"flow {flow_id!r} has no description: the "
                    "model cannot tell when to start it", ("flows", flow_id),
                    hint="add description: (Rasa requires it)", severity="warning"))
            if flow.guard is not None:
                self.condition_refs(doc, flow.guard, ("flows", flow_id, "if"),
                                    "flow.condition.unknown_slot")
            for index, trigger in enumerate(flow.model.nlu_trigger or []):
                other = triggers.get(trigger.name)
                if other is not None and other != flow_id:
                    self.issues.append(doc.issue(
                        "flow.nlu_trigger.duplicate_intent",
                        f"intent {trigger.name!r} already triggers flow {other!r}",
                        ("flows", flow_id, "nlu_trigger", index)))
                triggers.setdefault(trigger.name, flow_id)
            self.check_flow(doc, flow)

    def check_flow(self, doc: YamlDoc, flow: Flow) -> None:
        """Check step ids, ``next`` targets and conditions, then each step."""
        ids: set[str] = set()
        for step in flow.steps:
            if step.id in ids:
                self.issues.append(doc.issue("flow.duplicate_step_id",
                                             f"step id {step.id!r} is used twice", step.loc))
            ids.add(step.id)
        for step in flow.steps:
            for cond, target in step.next:
                if target != END and flow.step(target) is None:
                    self.issues.append(doc.issue(
                        "flow.next.unknown_step", f"next step {target!r} does not exist in "
                        f"flow {flow.id!r}", (*step.loc, "next"), hint="use a step id or END"))
                if cond is not None:
                    self.condition_refs(doc, cond, (*step.loc, "next"),
                                        "flow.condition.unknown_slot")
                    self.previous_flow_name(doc, cond, (*step.loc, "next"),
                                            "flow.condition.previous_flow_name_is_id")
            self.check_step(doc, flow, step)

    def previous_flow_name(self, doc: YamlDoc, cond: Condition, loc: Loc, code: str) -> None:
        """Warn about a comparison of ``context.previous_flow_name`` with a flow id."""
        for flow_id, name in flow_ids_for_names(cond, self.flows):
            message, hint = previous_flow_name_message(flow_id, name)
            self.issues.append(doc.issue(code, message, loc, hint=hint, severity="warning"))

    def check_step(self, doc: YamlDoc, flow: Flow, step: Step) -> None:
        """Check one step according to its kind."""
        m = step.model
        if step.kind == "collect":
            self.check_collect(doc, step)
        elif step.kind == "set_slots":
            for item in m.set_slots or []:
                for slot in item:
                    if not self.slot_known(slot):
                        self.issues.append(doc.issue(
                            "flow.set_slots.unknown_slot",
                            f"slot {slot!r} is not in the domain", (*step.loc, "set_slots"),
                            hint=self.slot_hint(slot)))
        elif step.kind == "action":
            self.check_action(doc, step, str(m.action))
        elif step.kind == "link":
            self.check_link(doc, flow, step)
        elif step.kind == "call":
            self.check_call(doc, step)

    def check_collect(self, doc: YamlDoc, step: Step) -> None:
        """Check a ``collect`` step: its slot, the question that asks for it, its rejections."""
        m = step.model
        if m.collect not in self.domain.slots and not self.slot_known(str(m.collect)):
            self.issues.append(doc.issue(
                "flow.collect.unknown_slot", f"slot {m.collect!r} is not in the domain",
                (*step.loc, "collect"), hint=self.slot_hint(str(m.collect))))
        definition = self.domain.slots.get(str(m.collect))
        from_text = definition is not None and m.force_slot_filling and any(
            mapping.get("type") == "from_text" for mapping in definition.mappings or [])
        if definition is not None and definition.nlu_only and not from_text:
            self.issues.append(doc.issue(
                "domain.slot.nlu_mapping_unsupported",
                f"slot {m.collect!r} is only filled by NLU mappings, and no NLU pipeline runs "
                "here: only buttons (/SetSlots) or actions can fill it", (*step.loc, "collect"),
                hint="add a from_llm mapping to the slot", severity="warning"))
        ask = m.utter or f"utter_ask_{m.collect}"
        if m.utter and not self.response_known(m.utter):
            self.issues.append(doc.issue(
                "flow.collect.unknown_response", f"response {m.utter!r} is not in the domain",
                (*step.loc, "utter"), hint=self.response_hint(m.utter)))
        elif ask in self.domain.responses:
            self.uttered.setdefault(ask, (doc, (*step.loc, "collect"), False))
        elif str(m.collect) not in self.domain.slots:
            pass  # the unknown slot is the error; no follow-on warning
        elif f"action_ask_{m.collect}" in self.domain.actions:
            pass  # the custom action asks
        elif not self.broken.unreadable_data and ask not in self.broken.responses:
            self.issues.append(doc.issue(
                "flow.collect.no_question", f"no response {ask!r} asks for slot {m.collect!r}: "
                "a question built from the slot's description is asked instead",
                (*step.loc, "collect"), hint=f"add {ask} under responses:", severity="warning"))
        for index, raw in enumerate(m.rejections or []):
            for key in sorted(set(raw) - {"if", "utter"}):
                self.issues.append(doc.issue(
                    "flow.rejection.ignored_key", f"{key!r} has no effect in a rejection: the "
                    "slot is reset and the same question is asked again",
                    (*step.loc, "rejections", index, key), severity="warning"))
        for index, rejection in enumerate(step.rejections):
            r_loc = (*step.loc, "rejections", index)
            self.condition_refs(doc, rejection.condition, (*r_loc, "if"),
                                "flow.condition.unknown_slot")
            if not self.response_known(rejection.utter):
                self.issues.append(doc.issue(
                    "flow.rejection.unknown_response",
                    f"response {rejection.utter!r} is not in the domain", (*r_loc, "utter"),
                    hint=self.response_hint(rejection.utter)))
            else:
                self.uttered.setdefault(rejection.utter, (doc, (*r_loc, "utter"), True))

    def check_action(self, doc: YamlDoc, step: Step, name: str) -> None:
        """Check that an ``action`` step names a response, a custom action or a built-in one."""
        if "{{" in name:
            return  # rendered from the pattern's context at run time
        if name in self.domain.responses:
            self.uttered.setdefault(name, (doc, (*step.loc, "action"), False))
            return
        if name in UNSUPPORTED_ACTIONS and name not in self.domain.actions:
            code, message, hint = UNSUPPORTED_ACTIONS[name]
            self.issues.append(doc.issue(code, message, (*step.loc, "action"), hint=hint,
                                         severity="warning"))
            return
        if name not in self.domain.actions and name not in BUILTIN_ACTIONS and \
                not self.response_known(name):
            self.issues.append(doc.issue(
                "flow.action.unknown", f"action {name!r} is neither a response nor a "
                "custom action in the domain", (*step.loc, "action"),
                hint=did_you_mean(name, [*self.domain.responses, *self.domain.actions,
                                         *BUILTIN_ACTIONS],
                                  "add it under responses: or actions: in the domain")))

    def check_link(self, doc: YamlDoc, flow: Flow, step: Step) -> None:
        """Check that a ``link`` step targets an existing flow that may be linked to."""
        target = str(step.model.link)
        if target not in self.flows and self.flow_known(target):
            return
        if target not in self.flows:
            self.issues.append(doc.issue("flow.link.unknown_flow",
                                         f"linked flow {target!r} does not exist",
                                         (*step.loc, "link"),
                                         hint=did_you_mean(target, self.flows)))
        elif target.startswith("pattern_") and target not in ALWAYS_LINKABLE and not (
                target == "pattern_chitchat" and flow.id.startswith("pattern_")):
            self.issues.append(doc.issue(
                "flow.link.to_pattern", f"a flow cannot link to the pattern {target!r}",
                (*step.loc, "link"), hint="patterns run when their situation arises"))

    def check_call(self, doc: YamlDoc, step: Step) -> None:
        """Check a ``call`` step: its target (flow, sub agent or MCP tool) and ``exit_if``."""
        m = step.model
        target = str(m.call)
        loc = (*step.loc, "call")
        if m.mcp_server:
            self.check_mcp_call(doc, step)
            return
        if target in self.broken.agents or (target not in self.flows and
                                            self.flow_known(target)):
            return
        if target.startswith("pattern_") and target in self.flows:
            self.issues.append(doc.issue("flow.call.to_pattern",
                                         f"a flow cannot call the pattern {target!r}", loc))
            return
        if target not in self.flows and target not in self.agents:
            self.issues.append(doc.issue(
                "flow.call.unknown_target", f"call target {target!r} is neither a flow nor a "
                "sub agent", loc, hint=did_you_mean(
                    target, [*self.flows, *self.agents],
                    "define the flow, or add sub_agents/<dir>/config.yml")))
            return
        called = self.flows.get(target)
        if called is not None and target not in self.agents and \
                any(s.kind == "link" for s in called.steps):
            self.issues.append(doc.issue(
                "flow.call.target_has_link", f"flow {target!r} is called, but it links to "
                "another flow; a called flow returns to its caller, so it may not link", loc,
                hint="call the other flow instead of linking to it"))
        if m.exit_if is None:
            return
        if target not in self.agents:
            self.issues.append(doc.issue("flow.exit_if.target_not_agent",
                                         f"exit_if needs a sub agent, but {target!r} is a flow",
                                         (*step.loc, "exit_if")))
            return
        for index, cond in enumerate(step.exit_if):
            c_loc = (*step.loc, "exit_if", index)
            if not cond.slot_names:
                self.issues.append(doc.issue(
                    "flow.exit_if.no_slot_reference",
                    f"exit condition {cond.text!r} references no slot", c_loc,
                    hint="write conditions over slots, e.g. slots.city is not null"))
            self.condition_refs(doc, cond, c_loc, "flow.exit_if.unknown_slot")
            for slot in unfillable_exit_slots([cond], self.domain, self.agent_configs[target]):
                self.issues.append(doc.issue(
                    "flow.exit_if.slot_not_fillable",
                    f"exit_if reads slot {slot!r}, which sub agent {target!r} cannot fill: "
                    "its mappings do not let the model fill it (Rasa 3.21 offers a set_slot "
                    "tool only for slots without mappings or with a from_llm mapping), so the "
                    "agent never completes", c_loc,
                    hint=f"add '- type: from_llm' to the mappings of slot {slot!r}",
                    severity="warning"))

    def check_mcp_call(self, doc: YamlDoc, step: Step) -> None:
        """Check an MCP tool call step: the server and the slots its mapping names."""
        m = step.model
        if m.mcp_server not in self.mcp_servers and m.mcp_server not in self.broken.mcp_servers:
            self.issues.append(doc.issue(
                "flow.call.unknown_mcp_server",
                f"MCP server {m.mcp_server!r} is not defined in endpoints.yml",
                (*step.loc, "mcp_server"), hint="add it under mcp_servers in endpoints.yml"))
        for part in ("input", "output"):
            for index, item in enumerate(getattr(m.mapping, part, None) or []):
                slot = item.slot
                if not self.slot_known(slot):
                    self.issues.append(doc.issue(
                        "flow.call.mapping_unknown_slot", f"slot {slot!r} is not in the domain",
                        (*step.loc, "mapping", part, index, "slot")))

    def check_tool_mappings(self, doc: YamlDoc, config: SubAgentConfig) -> None:
        """``inputs_from_state`` sources and ``outputs_to_state`` targets name known slots."""
        for tool, settings in config.configuration.tools.items():
            loc: Loc = ("configuration", "tools", tool)
            for arg, source in settings.inputs_from_state.items():
                kind, _, name = source.partition(".")
                if kind not in ("slots", "metadata") or not name:
                    self.issues.append(doc.issue(
                        "agent.validation.tools.invalid_state_source",
                        f"{source!r} is not slots.<name> or metadata.<key>",
                        (*loc, "inputs_from_state", arg)))
                elif kind == "slots" and not self.slot_known(name.split(".")[0]):
                    self.issues.append(doc.issue(
                        "agent.validation.tools.unknown_slot",
                        f"slot {name!r} is not in the domain", (*loc, "inputs_from_state", arg),
                        hint=self.slot_hint(name)))
            for slot in settings.outputs_to_state:
                if not self.slot_known(slot):
                    self.issues.append(doc.issue(
                        "agent.validation.tools.unknown_slot",
                        f"slot {slot!r} is not in the domain", (*loc, "outputs_to_state", slot),
                        hint=self.slot_hint(slot)))

    def condition_refs(self, doc: YamlDoc, cond: Condition, loc: Loc, code: str) -> None:
        """The slots a condition names exist, and it names nothing but slots and context."""
        for name in cond.slot_names:
            if not self.slot_known(name):
                self.issues.append(doc.issue(code, f"slot {name!r} is not in the domain", loc,
                                             hint=self.slot_hint(name)))
        unknown_reference(self.issues, doc, cond.text, loc)
        unquoted_words(self.issues, doc, cond, loc)


class ResponseChecker:
    """Parses response conditions and templates; checks the names they use."""

    def __init__(self, issues: list[ConfigIssue], domain: Domain,
                 docs: dict[str, YamlDoc], broken: Broken,
                 flows: Mapping[str, Flow] | None = None) -> None:
        self.issues = issues
        self.domain = domain
        self.docs = docs
        self.flows = dict(flows or {})
        self.known_slots = set(domain.slots) | BUILTIN_SLOTS | broken.slots
        self.lenient = broken.unreadable_data

    def check_all(self, uttered: dict[str, tuple[YamlDoc, Loc, bool]]) -> None:
        """Check the conditions and templates of every response variation."""
        for name, variations in self.domain.responses.items():
            doc = self.docs.get(name)
            if doc is None:
                continue  # a shipped default response
            for index, variation in enumerate(variations):
                loc: Loc = ("responses", name, index)
                self.check_condition(doc, variation, loc)
                self.check_templates(doc, name, variation, loc, uttered.get(name))

    def check_condition(self, doc: YamlDoc, variation: ResponseVariation, loc: Loc) -> None:
        """Parse a variation's condition and check the slots it names."""
        cond = variation.condition
        if cond is None:
            return
        if isinstance(cond, str):
            try:
                parsed = parse_condition(cond)
            except ConditionSyntaxError as exc:
                self.issues.append(doc.issue("domain.response.condition_invalid", str(exc),
                                             (*loc, "condition"),
                                             hint="see the conditions syntax in the docs"))
                return
            variation.use_parsed_condition(parsed)
            names = parsed.slot_names
            unknown_reference(self.issues, doc, cond, (*loc, "condition"),
                              "domain.response.condition_unknown_reference")
            for flow_id, name in flow_ids_for_names(parsed, self.flows):
                message, hint = previous_flow_name_message(flow_id, name)
                self.issues.append(doc.issue(
                    "domain.response.condition_previous_flow_name_is_id", message,
                    (*loc, "condition"), hint=hint, severity="warning"))
            unquoted_words(self.issues, doc, parsed, (*loc, "condition"),
                           "domain.response.condition_unquoted_word")
        elif isinstance(cond, list) and all(isinstance(i, dict) and "name" in i for i in cond):
            names = [str(i["name"]) for i in cond]
        else:
            self.issues.append(doc.issue(
                "domain.response.condition_invalid",
                "a condition is a predicate string or a list of {type: slot, name, value}",
                (*loc, "condition")))
            return
        for slot in names:
            if slot not in self.known_slots and not self.lenient:
                self.issues.append(doc.issue("domain.response.condition_unknown_slot",
                                             f"slot {slot!r} is not in the domain",
                                             (*loc, "condition")))

    def check_templates(self, doc: YamlDoc, name: str, variation: ResponseVariation, loc: Loc,
                        uttered: tuple[YamlDoc, Loc, bool] | None) -> None:
        """Check a variation's template engine and the names its texts interpolate."""
        template = (variation.metadata or {}).get("template")
        if template not in (None, "format", "jinja"):
            self.issues.append(doc.issue(
                "domain.response.unknown_template_engine",
                f"unknown template engine {template!r}", (*loc, "metadata", "template"),
                hint="use jinja, or leave it out for {slot} placeholders"))
            return
        if self.lenient:
            return
        known = set(self.known_slots)
        if uttered is not None and uttered[2]:
            known.add("value")
        # kwargs of a custom action's utter_message may fill other names, so an unknown name is
        # an error only in responses that only flows utter
        severity = "error" if uttered is not None else "warning"
        for key, text in _strings(variation.model_dump(exclude_none=True), loc):
            if key[len(loc)] not in _INTERPOLATED_KEYS:
                continue
            if variation.is_jinja:
                self.check_jinja(doc, key, text, known, severity)
            else:
                self.check_format(doc, key, text, known, severity)

    def check_format(self, doc: YamlDoc, loc: Loc, text: str, known: set[str],
                     severity: str) -> None:
        """Report ``{placeholder}`` names in ``text`` that are not in ``known``."""
        for placeholder in _PLACEHOLDER.findall(text):
            if placeholder.strip() not in known:
                unfilled = "its placeholders stay unfilled" if severity == "error" else \
                    "it stays unfilled unless a custom action passes it to utter_message"
                self.issues.append(doc.issue(
                    "domain.response.unknown_placeholder",
                    f"{{{placeholder}}} is not a slot: {unfilled}", loc,
                    hint="use a slot name, or metadata: {template: jinja} for expressions",
                    severity=severity))
                return

    def check_jinja(self, doc: YamlDoc, loc: Loc, text: str, known: set[str],
                    severity: str) -> None:
        """Report a Jinja syntax error in ``text``, or variables that are not in ``known``."""
        from jinja2 import TemplateSyntaxError, meta
        from jinja2.sandbox import SandboxedEnvironment

        env = SandboxedEnvironment()
        try:
            ast = env.parse(text)
        except TemplateSyntaxError as exc:
            self.issues.append(doc.issue("domain.response.jinja_syntax_error",
                                         f"template syntax error: {exc.message}", loc,
                                         hint="fix the Jinja2 syntax"))
            return
        unknown = sorted(meta.find_undeclared_variables(ast) - known - RESPONSE_JINJA_NAMES
                         - set(env.globals))
        if unknown:
            self.issues.append(doc.issue(
                "domain.response.unknown_placeholder",
                f"template uses {', '.join(unknown)}, which {'is' if len(unknown) == 1 else 'are'}"
                " not a slot", loc, hint="use slot names, context.<field> or value",
                severity=severity))


def _strings(value: Any, loc: Loc) -> Iterable[tuple[Loc, str]]:
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in ("metadata", "condition", "channel", "id"):
                yield from _strings(item, (*loc, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*loc, index))


def rasa_imports(root: Path, module: str) -> list[ConfigIssue]:
    """Custom action files that import ``rasa`` (Rasa Pro itself, not ``rasa_sdk``).

    Inside Rasa Pro that import always works; here Rasa Pro is not installed, so the action
    would fail when it runs. Reported as warnings naming the file, the line and the module,
    unless a ``rasa`` package is importable or the compatibility layer provides the module.
    """
    import ast

    from subagents import rasa_compat

    if rasa_compat.real_rasa_available():
        return []
    base = root / Path(*module.split("."))
    files = sorted(base.rglob("*.py")) if base.is_dir() else \
        [p for p in (base.with_suffix(".py"),) if p.is_file()]
    issues = []
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue  # reported when the action package is imported
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if (name == "rasa" or name.startswith("rasa.")) and \
                        name not in rasa_compat.MODULES:
                    issues.append(ConfigIssue(
                        "actions.imports_rasa",
                        f"imports {name}, which is part of Rasa Pro and not installed here: "
                        "this action fails when it runs",
                        file=str(path.relative_to(root)), line=node.lineno,
                        hint="use the standard library or rasa_sdk instead",
                        severity="warning"))
    return issues
