from kernlog.commands.main import main

main(prog_name="kernlog")
