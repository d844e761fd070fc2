"""Config models and the project loader."""

from subagents.config.domain import Domain, SlotDefinition
from subagents.config.endpoints import EndpointsConfig, McpServerConfig, ModelConfig, ModelGroup
from subagents.config.flows import Flow, Step
from subagents.config.project import AgentSpec, Project, ProjectPaths, collect_issues, load_project
from subagents.config.sub_agent import AgentConfiguration, SubAgentConfig

__all__ = ["AgentConfiguration", "AgentSpec", "Domain", "EndpointsConfig", "Flow",
           "McpServerConfig", "ModelConfig", "ModelGroup", "Project", "ProjectPaths",
           "SlotDefinition", "Step",
           "SubAgentConfig", "collect_issues", "load_project"]
