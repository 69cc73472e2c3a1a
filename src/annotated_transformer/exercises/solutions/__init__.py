"""Reference solutions, one module per chapter (the book shows them in toggles).

A teacher may delete this folder to hand out the book without them: the site then
says where each toggle was that the solution is not included, and ``--solutions``
says so in one line.
"""
