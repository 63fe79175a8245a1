/* lockstep public API (work in progress; see src/ for the engine). */
#ifndef LOCKSTEP_H
#define LOCKSTEP_H
#endif
