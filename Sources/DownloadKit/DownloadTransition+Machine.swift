import DownloadKitDecisions

extension DownloadTransition {
    /// The library's transition for one the download machine published: the one place that maps them.
    init(_ transition: MachineTransition<DownloadError>) {
        switch transition {
        case .start: self = .start
        case .resume(let offset): self = .resume(offset: offset)
        case .restart(let reason): self = .restart(reason)
        case .redirect(let target): self = .redirect(to: target)
        case .refreshURL(let target): self = .refreshURL(to: target)
        case .stayOnOneConnection(let reason): self = .stayOnOneConnection(reason)
        case .notResumable: self = .notResumable
        case .receive(let offset): self = .receive(resumedFrom: offset)
        case .retry(let delay, let attempt, let error): self = .retry(after: delay, attempt: attempt, error: error)
        }
    }
}
