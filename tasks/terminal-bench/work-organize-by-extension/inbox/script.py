content of script.py
