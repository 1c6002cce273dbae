"""The kernel command line: boot files, the bootloader in use, the policy of parameters,
grub's configuration language, and the options of the kernel_cmdline module. Runs on the
node (standard library only)."""
