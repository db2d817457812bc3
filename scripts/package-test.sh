#!/bin/sh
# The Debian package, installed and checked (README "Test"; run by scripts/test.sh as root):
# build it (scripts/package.sh), `dpkg -i`, then
#   - `tierd --version` from /usr/bin is this version;
#   - `systemd-analyze verify` passes on the installed unit;
#   - `tierd config check` passes on the installed /etc/tierd/tierd.toml, a conffile;
#   - the man pages, completions and documentation are where Debian looks for them;
# then `dpkg -r` and `dpkg -P` leave nothing behind.
#
# Needs root, dpkg, cargo-deb and systemd-analyze (scripts/package-deps.sh installs the last
# two). Without them it prints SKIP, or fails when TIERD_REQUIRE_PACKAGE is set (test.sh sets
# it once package-deps.sh succeeded). TIERD_PACKAGE_PROFILE picks the binary (package.sh):
# test.sh uses `static`, the release build the guest tests have already made.
set -eu
cd "$(dirname "$0")/.."

skip() {
  if [ -n "${TIERD_REQUIRE_PACKAGE:-}" ]; then
    echo "package-test: FAIL: $1 (TIERD_REQUIRE_PACKAGE is set)" >&2
    exit 1
  fi
  echo "package-test: SKIP: $1" >&2
  exit 0
}
fail() {
  echo "package-test: FAIL: $1" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || skip "not root (dpkg -i)"
command -v dpkg >/dev/null 2>&1 || skip "no dpkg (not Debian)"
command -v cargo-deb >/dev/null 2>&1 || skip "no cargo-deb (scripts/package-deps.sh)"
command -v systemd-analyze >/dev/null 2>&1 || skip "no systemd-analyze (scripts/package-deps.sh)"
if dpkg-query -W -f='${Status}' tierd 2>/dev/null | grep -q 'ok installed'; then
  fail "a tierd package is installed already; this test installs and purges its own"
fi

deb="$(./scripts/package.sh)"
echo "package-test: $deb" >&2
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
trap 'dpkg -P tierd >/dev/null 2>&1 || true' EXIT
dpkg -i "$deb"

[ "$(command -v tierd)" = /usr/bin/tierd ] || fail "tierd is not /usr/bin/tierd: $(command -v tierd)"
got="$(/usr/bin/tierd --version)"
[ "$got" = "tierd $version" ] || fail "tierd --version says '$got', want 'tierd $version'"

unit="$(dpkg -L tierd | grep '/systemd/system/tierd\.service$')" || fail "no tierd.service in the package"
grep -q '^ExecStart=/usr/bin/tierd run --config /etc/tierd/tierd.toml$' "$unit" ||
  fail "$unit does not start /usr/bin/tierd"
# Documentation=man:tierd(1) is checked with man when it is there.
if command -v man >/dev/null 2>&1; then man_opt=--man=yes; else man_opt=--man=no; fi
out="$(systemd-analyze verify "$man_opt" "$unit" 2>&1)" || {
  echo "$out" >&2
  fail "systemd-analyze verify $unit"
}
# verify exits 0 on some warnings; any line naming the unit is one.
if echo "$out" | grep -q 'tierd\.service'; then
  echo "$out" >&2
  fail "systemd-analyze verify warns about $unit"
fi

/usr/bin/tierd config check /etc/tierd/tierd.toml
cmp /etc/tierd/tierd.toml deploy/tierd.toml || fail "/etc/tierd/tierd.toml is not deploy/tierd.toml"
dpkg-query -W -f='${Conffiles}\n' tierd | grep -q '^ */etc/tierd/tierd.toml ' ||
  fail "/etc/tierd/tierd.toml is not a conffile"
# Installed disabled: it moves other processes' memory only once the operator enables it.
if [ -d /etc/systemd/system/multi-user.target.wants ] &&
  [ -e /etc/systemd/system/multi-user.target.wants/tierd.service ]; then
  fail "the package enabled tierd.service"
fi

# One man page per subcommand, as `tierd man` writes them, each a man page.
for page in tierd tierd-run tierd-config tierd-config-check tierd-config-show tierd-status; do
  f="/usr/share/man/man1/$page.1.gz"
  [ -s "$f" ] || fail "no $f"
  zcat "$f" | grep -q '^\.TH' || fail "$f is not a man page"
done
bash_c=/usr/share/bash-completion/completions/tierd
[ -s "$bash_c" ] || fail "no $bash_c"
bash -n "$bash_c" || fail "$bash_c does not parse"
for f in /usr/share/zsh/vendor-completions/_tierd /usr/share/fish/vendor_completions.d/tierd.fish \
  /usr/share/doc/tierd/copyright /usr/share/doc/tierd/user-guide.md; do
  [ -s "$f" ] || fail "no $f"
done

dpkg -r tierd
[ ! -e /usr/bin/tierd ] || fail "dpkg -r left /usr/bin/tierd"
[ -e /etc/tierd/tierd.toml ] || fail "dpkg -r removed the conffile (only purge should)"
dpkg -P tierd
[ ! -e /etc/tierd/tierd.toml ] || fail "dpkg -P left /etc/tierd/tierd.toml"
trap - EXIT
echo "package-test: ok: $deb installed, checked and purged"
