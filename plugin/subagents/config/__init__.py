"""Config models and the project loader."""

from .domain import Domain, SlotDefinition
from .endpoints import EndpointsConfig, McpServerConfig, ModelConfig, ModelGroup
from .flows import Flow, Step
from .project import AgentSpec, Project, ProjectPaths, collect_issues, load_project
from .sub_agent import AgentConfiguration, SubAgentConfig

__all__ = ["AgentConfiguration", "AgentSpec", "Domain", "EndpointsConfig", "Flow",
           "McpServerConfig", "ModelConfig", "ModelGroup", "Project", "ProjectPaths",
           "SlotDefinition", "Step",
           "SubAgentConfig", "collect_issues", "load_project"]
