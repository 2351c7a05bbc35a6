"""The Spark engine: session factory and connector jars."""

from eoctl.engine.session import java_version, start_session

__all__ = ["java_version", "start_session"]
