# Sourced by the shell scripts that download from a loopback nginx (Scripts/chaos.sh, Scripts/check-deb.sh): one
# definition of that origin.
#
#   start_nginx_origin WORK [DIRECTIVE ...]
#
# serves WORK/www on 127.0.0.1 on a free port, in the foreground with one worker (its config, logs and temp
# files under WORK/nginx), each DIRECTIVE (e.g. "limit_rate 6m;") added to the server block; returns once it
# accepts connections. Sets nginx_port and nginx_pid (the caller stops it: kill "$nginx_pid").
start_nginx_origin() {
    local work="$1" directive extra=""
    shift
    for directive in "$@"; do extra+="        $directive"$'\n'; done
    local binary
    binary="$(command -v nginx || echo /usr/sbin/nginx)"
    [ -x "$binary" ] || { echo "nginx not found; install it (Scripts/install-deps.sh)" >&2; return 2; }
    mkdir -p "$work/www" "$work/nginx/logs" "$work/nginx/tmp"
    nginx_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    cat >"$work/nginx/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $work/nginx/tmp/body;
    proxy_temp_path $work/nginx/tmp/proxy;
    fastcgi_temp_path $work/nginx/tmp/fastcgi;
    uwsgi_temp_path $work/nginx/tmp/uwsgi;
    scgi_temp_path $work/nginx/tmp/scgi;
    server {
        listen 127.0.0.1:$nginx_port;
        root $work/www;
$extra    }
}
CONF
    "$binary" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/logs/error.log" &
    nginx_pid=$!
    local _
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$nginx_port") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nginx did not accept connections on 127.0.0.1:$nginx_port (log: $work/nginx/logs/error.log)" >&2
    return 1
}
