"""Configuration: the YAML file's models, units and loader."""

from bridge.config.loader import load_config, parse_config
from bridge.config.models import Config
from bridge.config.topics import TopicMapping

__all__ = ["Config", "TopicMapping", "load_config", "parse_config"]
