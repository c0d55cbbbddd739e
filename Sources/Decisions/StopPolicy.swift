/// What a run that ends without its file in place does with its working files (the partial, its resume
/// record and its journal): the one stop and clean-up rule of the engine, as a value (table-tested in
/// `StopPolicyTests`). The executor performs the answer; it decides nothing about it.
///
/// - Only the writer holding the partial's lock touches the files: a writer refused because another holds
///   them (or failing before it opened them) must not remove or rewrite another's files.
/// - Cancel removes them (the caller asked for it). Pause keeps them, checkpointed, with resume data.
/// - A failure removes them when the bytes are complete but proved wrong (the whole file's checksum or
///   Content-MD5; a piece failing from every source of a single-connection run) — nothing is worth
///   resuming — and when nothing was received anywhere (a 404, a TLS failure, a redirect loop), so no
///   clutter is left; otherwise it keeps them, checkpointed, for a resume. A piece that failed in a
///   segmented run keeps the verified others.
package enum StopPolicy {
    /// Why the run stopped.
    package enum Stop: Sendable, Hashable {
        case cancel
        case pause
        case failure(Verdict)
    }

    /// What a failure says of the bytes already written.
    package enum Verdict: Sendable, Hashable {
        /// The whole file was checked and is wrong (checksum, Content-MD5).
        case fileWrong
        /// A piece failed its checksum from every source.
        case pieceWrong
        /// Anything else: the bytes written so far are as good as they were.
        case other
    }

    /// What the executor does with the working files.
    package enum Disposal: Sendable, Hashable {
        /// Unlink the partial, its record and its journal while the lock is held, then close the partial.
        case remove
        /// Checkpoint (sync, write the record) and hand out resume data.
        case keep
        /// Touch nothing: the files are another writer's, or there are none of ours.
        case leave
    }

    /// The disposal for `stop`. `holdsLock`: this writer has the partial open and locked; `received`:
    /// some byte of the resource is in the partial (a prefix or any segment); `segmented`: the partial
    /// has a segment map; `hasWorkingFile`: the download has a partial path at all.
    package static func disposal(
        for stop: Stop, holdsLock: Bool, received: Bool, segmented: Bool, hasWorkingFile: Bool
    ) -> Disposal {
        switch stop {
        case .cancel:
            return holdsLock ? .remove : .leave
        case .pause:
            return .keep
        case .failure(let verdict):
            guard holdsLock else { return .leave }
            switch verdict {
            case .fileWrong: return .remove
            case .pieceWrong where !segmented: return .remove
            case .pieceWrong, .other: break
            }
            if !received { return .remove }
            return hasWorkingFile ? .keep : .leave
        }
    }
}
