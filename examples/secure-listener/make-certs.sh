#!/bin/sh
# A throwaway CA and a listener certificate signed by it, to try this example on one machine:
#
#   examples/secure-listener/make-certs.sh [DIR [HOST...]]
#
# writes DIR/ca.pem (what clients trust), DIR/server.pem and DIR/server-key.pem (what
# plateau.yaml's kafka_api.tls names); DIR defaults to tls/ beside this script and HOST to
# localhost and 127.0.0.1. Clients check that the certificate names the host they dial, so
# list every name in kafka_api.advertised. In production, use a certificate from your own CA.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/tls}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- localhost 127.0.0.1

names=""
for host in "$@"; do
    case $host in
        *[!0-9.]*) names="$names,DNS:$host" ;;
        *) names="$names,IP:$host" ;;
    esac
done

# The key files are readable by their owner only.
umask 077
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=plateau example CA" \
    -keyout "$work/ca-key.pem" -out "$out/ca.pem" 2>"$work/log" || { cat "$work/log"; exit 1; }
openssl req -newkey rsa:2048 -nodes -subj "/CN=$1" \
    -keyout "$out/server-key.pem" -out "$work/server.csr" 2>"$work/log" || { cat "$work/log"; exit 1; }
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "${names#,}" >"$work/server.ext"
openssl x509 -req -days 30 -in "$work/server.csr" -CA "$out/ca.pem" -CAkey "$work/ca-key.pem" \
    -CAcreateserial -CAserial "$work/ca.srl" -extfile "$work/server.ext" \
    -out "$out/server.pem" 2>"$work/log" || { cat "$work/log"; exit 1; }
# The CA's key goes with the work folder: nothing else can be signed with it.
echo "$out: ca.pem, server.pem and server-key.pem for $*"
