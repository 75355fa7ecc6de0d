package stage

// Wrap puts middleware around every handler r makes: each factory
// registered so far makes mw(h) instead of h (otelstage.Handler, to trace
// a whole application's stages). What the registry knows of the handlers
// stays: the stages their args name (StageArgs) and their args types
// (DeclareArgs, or an Args field of the unwrapped handler), so a file is
// checked at load as before. Handlers registered after Wrap are not
// wrapped.
func (r *Registry) Wrap(mw func(Handler) Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.args == nil {
		r.args = map[string]func() any{}
	}
	for name, f := range r.factories {
		if _, declared := r.args[name]; !declared {
			r.args[name] = func() any { return argsField(f()) }
		}
		r.factories[name] = func() Handler { return mw(f()) }
	}
}
