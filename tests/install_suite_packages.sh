#!/bin/sh
# Installs Debian's packages for the scale-out and HA suites (`make suite-packages`, as root) and
# for the end-to-end benchmark (`make bench-packages`), and leaves no service of them running or
# enabled: the suites and the benchmark start their own processes.
# A policy-rc.d that refuses every start keeps apt from starting a service, but Debian's postinst
# still enables it (deb-systemd-helper, update-rc.d), so the units of every package this run
# newly installs (its dependencies included) are disabled afterwards. A package that was already
# installed keeps whatever its owner chose.
set -u

echo "Installing Debian's $* (apt, system-wide) for the suites or the benchmark;" \
    "no service is started or enabled"
apt-get update -qq || exit
# "Inst name (version ...)" is a fresh install; an upgrade reads "Inst name [old] (new ...)".
fresh=$(apt-get install -s "$@" | sed -n 's/^Inst \([^ ]*\) (.*/\1/p')

printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
status=$?
rm -f /usr/sbin/policy-rc.d

for package in $fresh; do
    # Template units (name@.service) are never enabled by a package; the others may be.
    for unit in $(dpkg -L "$package" | sed -nE 's#^(/usr)?/lib/systemd/system/([^@/]+\.(service|socket|timer))$#\2#p'); do
        # It acts only for a package's own maintainer scripts, which this variable names.
        DPKG_MAINTSCRIPT_PACKAGE="$package" deb-systemd-helper disable "$unit"
    done
    for script in $(dpkg -L "$package" | sed -nE 's#^/etc/init\.d/([^/]+)$#\1#p'); do
        update-rc.d "$script" disable >/dev/null 2>&1
    done
done
exit $status
