#!/bin/sh
# root-reads.sh FILE.c...: "FILE.c: FUNCTION" for each function of the
# given files that reads from a process, a file, a pipe or the job's
# environment (the calls below), one a line. plugin-attacks.sh (19) checks
# the plugin's list against doc/SECURITY.md's table "Where root reads what
# a user controls". A function's definition starts at column 0 with its
# name before '(' and no ';' (the house style, .clang-format).
exec awk '
FNR == 1 { fn = "" }
/^[a-zA-Z].*[a-z_0-9]+\(/ && !/;[ ]*$/ && !/^(static )?(struct|enum|union) [a-z_]+ *\{/ {
  line = $0; sub(/\(.*/, "", line); n = split(line, w, /[ *]+/); fn = w[n]
}
/(^|[^a-zA-Z_0-9])(read|pread|readlink|fgets|getline|fread|waitid|skiff_rec_read[a-z_]*|skiff_helper_reply|skiff_helper_joined|skiff_proc_stat|skiff_read_fd_small|skiff_read_file|skiff_conf_read|skiff_ns_owned_by|skiff_step_open_user_path|spank_getenv)[ ]*\(|S_JOB_ENV/ {
  if (fn != "") { f = FILENAME; sub(/.*\//, "", f); key = f ": " fn; if (!(key in seen)) { seen[key] = 1; print key } }
}' "$@"
