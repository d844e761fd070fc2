"""The dialogue runtime: stack, commands, understanding, flow executor, one turn end to end."""
