"""The DOM layer (Pyodide only): the bar over the headless store."""
