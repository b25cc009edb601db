"""The stack model's parts; infra.config is the public entry (`parse`, `load`, `ConfigError`, `PlatformConfig`)."""
