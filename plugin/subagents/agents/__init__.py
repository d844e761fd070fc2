"""The ReAct sub agents: schemas, the loop, open and task agents, the registry."""
