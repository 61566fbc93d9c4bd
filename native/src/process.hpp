// Which process owns an object's threads: fork() copies objects into a child, not threads.
#pragma once

#include <unistd.h>

namespace tt {

// The calling process's id, recorded by objects that start threads.
inline long current_pid() { return static_cast<long>(::getpid()); }

// Whether this is a child forked after `owner` (a process id from current_pid()) made the
// object: its threads exist only there, so it must neither wait for nor join them.
inline bool forked_since(long owner) { return current_pid() != owner; }

}  // namespace tt
