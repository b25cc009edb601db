"""aifactory's Pulumi program, typed stack config, offline synth and CLI."""
