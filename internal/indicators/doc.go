// Package indicators turns samples into thrashing indicators: each tracked
// process's working set (Denning's W(t, τ)), the high-fault set and the
// host thrash detector of TPF (Jiang and Zhang, 2001), and the overcommit
// ratio of the working sets to the memory they have. It sits between the
// sampler and the collectors: it completes each sample before publication.
package indicators
