"""The Spark engine: session factory and connector jars."""

from eoctl.engine.session import end_driver_jvm, java_version, start_session, stop_session

__all__ = ["end_driver_jvm", "java_version", "start_session", "stop_session"]
