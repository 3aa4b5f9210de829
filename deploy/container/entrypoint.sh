#!/bin/sh
# Entrypoint of the thrashscope image: starts the observer with the given
# flags, first giving it a parent for run cgroups on cgroup v2.
#
# A run cgroup needs a parent with memory in its cgroup.subtree_control, and
# the kernel enables a controller there only while the cgroup holds no
# process. In its own cgroup namespace (the default on cgroup v2) the
# container's cgroup is the root of /sys/fs/cgroup and holds the container's
# processes. So, as docker:dind does, move them into the leaf observer/,
# enable memory at the root and pass --cgroup.parent: run cgroups become
# siblings of observer/. The observer itself never writes a cgroup it did not
# make; the container runtime made this one for the container.
#
# Nothing is touched when --cgroup.parent is given, on cgroup v1 (run cgroups
# nest in the container's memory cgroup as it is), in the host's cgroup
# namespace, or where /sys/fs/cgroup is read-only (an unprivileged container):
# the observer starts as it is and logs why runs are refused, if they are.
set -u
observer=/usr/local/bin/observer
root=/sys/fs/cgroup

case " $* " in
*" --cgroup.parent"*) exec "$observer" "$@" ;;
esac

if [ "$(stat -f -c %T "$root" 2>/dev/null)" = cgroup2fs ] &&
	[ "$(sed -n "s/^0:://p" /proc/self/cgroup)" = / ] &&
	[ -w "$root/cgroup.procs" ] &&
	mkdir -p "$root/observer"; then
	# Every process: one left behind keeps the controller off.
	while read -r pid; do
		echo "$pid" >"$root/observer/cgroup.procs" 2>/dev/null || :
	done <"$root/cgroup.procs"
	if echo +memory >"$root/cgroup.subtree_control" 2>/dev/null; then
		set -- --cgroup.parent="$root" "$@"
	else
		echo "thrashscope-entrypoint: cannot enable memory in $root/cgroup.subtree_control (is memory in cgroup.controllers?): runs will be refused, observing goes on" >&2
	fi
fi
exec "$observer" "$@"
