"""Configuration: the pydantic model and its TOML loader."""

from eoctl.config.loader import load_config, masked, resolve_config_path
from eoctl.config.model import Config, EndpointConfig, KafkaConnection, TopicInput

__all__ = ["Config", "EndpointConfig", "KafkaConnection", "TopicInput", "load_config", "masked", "resolve_config_path"]
