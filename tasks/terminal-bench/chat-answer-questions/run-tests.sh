#!/bin/bash
# Runs the task's tests on /app (TEST_DIR holds tests/, which the agent never sees).
python3 -m pytest -rA -p no:cacheprovider "$TEST_DIR/test_outputs.py"
