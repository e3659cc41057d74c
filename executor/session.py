"""The session pipeline: prepare -> gate -> execute -> capture -> present -> journal."""
