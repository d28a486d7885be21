"""Stage 2, rules: the compatibility knowledge base and the one rule engine over declared or observed facts."""
