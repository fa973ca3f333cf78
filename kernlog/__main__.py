from kernlog.commands.cli import main

main(prog_name="kernlog")
