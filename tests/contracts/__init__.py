"""Engine contracts checked by the engines' own code at the kit's pins (`make contracts`, outside CI)."""
