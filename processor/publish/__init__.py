"""Publishing: validating messages and routing them to the input logs."""
