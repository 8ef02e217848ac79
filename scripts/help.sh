# Sourced by the bash scripts here: `-h` or `--help` as the first argument prints the script's header
# comment (from line 2 to the first line that is not a comment) on stdout and exits 0.
case "${1:-}" in
  -h | --help)
    sed -n '2,/^[^#]/{/^[^#]/d;s/^# \{0,1\}//;p}' "$0"
    exit 0
    ;;
esac
