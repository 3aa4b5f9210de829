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
# Nothing more is touched when --cgroup.parent is given, on cgroup v1 (run
# cgroups nest in the container's memory cgroup as it is), in the host's
# cgroup namespace, or where /sys/fs/cgroup stays read-only (a container
# given neither privileges nor CAP_SYS_ADMIN): the observer starts as it is
# and logs why runs are refused, if they are.
set -u
observer=/usr/local/bin/observer
root=/sys/fs/cgroup

# A container that is not privileged gets its cgroup mounts read-only. Given
# CAP_SYS_ADMIN and CAP_SETPCAP for this alone (the compose kit), the memory
# hierarchy and cgroup2 are made writable here where the mount shows this
# container's own cgroup and nothing above it (its root in mountinfo is this
# process's cgroup, in its own cgroup namespace or the host's), and the
# observer starts without those two capabilities (dropping them from the
# bounding set takes CAP_SETPCAP): it keeps the rest it was given.
drop=""

# own prints this process's cgroup in the v1 hierarchy of controller $1, or
# in cgroup2 when $1 is empty.
own() {
	while IFS=: read -r _ ctl path; do
		if [ -z "$1" ]; then
			[ -z "$ctl" ] && echo "$path" && return
		else
			case ",$ctl," in *",$1,"*) echo "$path" && return ;; esac
		fi
	done </proc/self/cgroup
}

# writable makes the mount at $2 (root $1 in its filesystem, options $3,
# then mountinfo's "[optional fields] - type source super options")
# writable if it is a read-only cgroup2 or v1 memory mount of this
# container's own cgroup.
writable() {
	mroot=$1 dir=$2 mopts=$3
	case "$dir" in "$root" | "$root"/*) ;; *) return ;; esac
	case ",$mopts," in *,ro,*) ;; *) return ;; esac
	shift 3
	while [ $# -gt 0 ] && [ "$1" != - ]; do shift; done
	[ $# -ge 4 ] || return
	case "$2:,$4," in
	cgroup2:*) [ "$mroot" = "$(own "")" ] || return ;;
	cgroup:*,memory,*) [ "$mroot" = "$(own memory)" ] || return ;;
	*) return ;;
	esac
	mount -o remount,bind,rw "$dir" ||
		echo "thrashscope-entrypoint: cannot make $dir writable: runs will be refused, observing goes on" >&2
	drop="setpriv --bounding-set=-sys_admin,-setpcap --inh-caps=-sys_admin,-setpcap --"
}

capeff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
if [ $((0x${capeff:-0} >> 21 & 1)) = 1 ] && [ $((0x${capeff:-0} >> 8 & 1)) = 1 ]; then
	while read -r _ _ _ mroot dir mopts rest; do
		# shellcheck disable=SC2086 # the fields, split on purpose
		writable "$mroot" "$dir" "$mopts" $rest
	done </proc/self/mountinfo
fi

case " $* " in
*" --cgroup.parent"*) exec $drop "$observer" "$@" ;;
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
exec $drop "$observer" "$@"
