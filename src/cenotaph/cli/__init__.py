"""The ``cenotaph`` command line: JSON on stdout by default, ``--table`` for people.

One module per concern: ``main`` holds the command group, exit codes and the list of commands;
``options`` the shared ``--data`` and ``--table`` options; ``output`` JSON and table rendering;
each other module holds one small family of commands. Adding a command is one module and one
line in ``main.COMMANDS``.
"""
