package settings

// Abandon frees the journal's lock without restoring anything, as the
// death of its process (a kill -9) would.
func (j *Journal) Abandon() {
	if j.lock != nil {
		j.lock.Close()
		j.lock = nil
	}
}
