import Foundation
import CDownloadKitSystem
import Synchronization
import HTTPClient

/// One resumable download of one URL to one destination.
///
/// The transfer runs on its own thread (blocking socket and file I/O never run on Swift's
/// cooperative pool); this object is the async handle to it. Create it, call ``start()``, then await
/// ``result()`` or iterate ``events``. ``pause()`` stops the transfer and returns resume data (the
/// resume-info property list); a new `Download` created with that data continues where it stopped.
/// Even without resume data, a new download to the same destination continues from the partial file.
///
/// ```swift
/// let download = try Download(DownloadRequest(url: "https://example.com/big.iso",
///                                             destination: .file("/data/big.iso")))
/// download.start()
/// let result = try await download.result()
/// print(result.path, result.bytes)
/// ```
public final class Download: Sendable {
    /// The request this download was created with.
    public let request: DownloadRequest
    /// Its configuration.
    public let configuration: DownloadConfiguration
    /// A short random identifier (8 hexadecimal digits) for logs (`download.id` metadata) and the
    /// transfer thread's name (`dk-<id>`).
    public let id: String
    private let control: DownloadControl
    private let client: DKHTTPClient?
    private let started = Atomic<Bool>(false)

    /// Creates a download; nothing happens until ``start()``.
    /// - Parameters:
    ///   - request: What to download and where.
    ///   - configuration: Retries, timeouts, limits, the URL provider.
    ///   - client: An HTTP client to share (connection reuse across downloads); one is created from
    ///     `configuration.client` when nil.
    public convenience init(
        _ request: DownloadRequest, configuration: DownloadConfiguration = DownloadConfiguration(), client: DKHTTPClient? = nil
    ) {
        self.init(request, configuration: configuration, client: client, keepsEventBacklog: true)
    }

    /// - Parameter keepsEventBacklog: Whether events sent before the first ``events`` subscription are
    ///   kept for it. ``run(_:configuration:client:)`` passes false: its download is never handed out, so
    ///   nobody can subscribe, and keeping its events cost a small file about 3 % of its CPU.
    init(_ request: DownloadRequest, configuration: DownloadConfiguration, client: DKHTTPClient?, keepsEventBacklog: Bool) {
        self.request = request
        self.configuration = configuration
        self.client = client
        let id = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        self.id = String(repeating: "0", count: 8 - id.count) + id
        self.control = DownloadControl(
            observer: DownloadObserver(logger: configuration.logger, url: request.url, id: self.id),
            keepsEventBacklog: keepsEventBacklog)
    }

    /// Creates a download that continues from resume data alone: the URL, the destination and the
    /// checksum come from the property list (``pause()``'s data, a failed download's
    /// ``DownloadError/resumeData``, or the `.dkresume` file), as `URLSession.downloadTask(withResumeData:)`
    /// does. Apple NSURLSession resume data carries no destination: pass one.
    /// - Throws: ``DownloadError`` `.invalidResumeData` when the data cannot be read or names no
    ///   destination and none is given.
    public convenience init(
        resumingWith resumeData: Data, destination: DownloadDestination? = nil,
        configuration: DownloadConfiguration = DownloadConfiguration(), client: DKHTTPClient? = nil
    ) throws(DownloadError) {
        let info: ResumeInfo
        do {
            info = try ResumeInfo.decode(resumeData)
        } catch {
            throw DownloadError(.invalidResumeData, "the resume data cannot be used: \(error)")
        }
        guard let target = destination ?? info.destinationPath.map(DownloadDestination.file) else {
            throw DownloadError(
                .invalidResumeData,
                "the resume data names no destination (Apple resume data never does): pass destination:")
        }
        let checksum = info.checksum.flatMap { Checksum(parsing: "\($0.algorithm)=\($0.expectedHex)") }
        self.init(
            DownloadRequest(url: info.originalURL, destination: target, checksum: checksum, resumeData: resumeData),
            configuration: configuration, client: client)
    }

    /// Events in order: state changes with reasons, rate-limited progress, then `finished` or `failed`.
    ///
    /// Each access is a new subscription that sees every event from then on (the first one also gets
    /// the events sent before it; a subscription made after the end sees the terminal event), so any
    /// number of consumers can read. A consumer that falls
    /// more than 512 events behind loses progress snapshots (the oldest first), never a state change or
    /// the terminal event. The sequence ends after the terminal event; leaving a `for await`
    /// early ends the subscription, not the download.
    public var events: EventSequence<DownloadEvent> { control.events }

    /// The latest progress snapshot.
    public var progress: DownloadProgress { control.progress }

    /// The current state.
    public var state: DownloadState { control.currentState }

    /// Whether the server supports resuming, once known.
    public var isResumable: Bool? { control.isResumable }

    /// Starts the transfer on a dedicated thread. Calling it again does nothing.
    public func start() {
        guard started.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        // Paused or cancelled before it started: it already has its outcome; start no transfer.
        guard control.outcome == nil else { return }
        let control = self.control
        let request = self.request
        let configuration = self.configuration
        let client = self.client
        // On a transfer thread of its own (reused: TransferThreads), which carries `dk-<id>` in the kernel
        // (ps, top and /proc show it; Foundation's `Thread.name` does not reach the kernel on Linux).
        TransferThreads.shared.run(name: "dk-\(id)") {
            let outcome: Result<DownloadResult, DownloadError>
            do throws(DownloadError) {
                let engine = try TransferEngine(
                    request: request, configuration: configuration, control: control, client: client)
                // An existing destination the machine keeps (`--no-clobber`, a 304) ends the run with this state.
                let result = try engine.run()
                if result.keptExistingFile { control.setState(.keepExistingFile) }
                outcome = .success(result)
            } catch {
                outcome = .failure(error)
            }
            control.finish(outcome)
        }
    }

    /// Waits for the end.
    ///
    /// Cancelling the task that awaits this (a task group's timeout, a cancelled server request, a
    /// SwiftUI `.task`) stops the transfer within one poll interval, keeps every durable byte and throws
    /// `.cancelled` with ``DownloadError/resumeData`` attached — unless `onCancellation` is
    /// ``TaskCancellationBehavior/continueTransfer``, in which case the transfer goes on detached and
    /// only this wait ends (with `.cancelled`, no resume data).
    /// - Returns: The finished download.
    /// - Throws: ``DownloadError``; `.paused` and `.cancelled` when stopped by the caller. A failure that
    ///   left resumable bytes carries ``DownloadError/resumeData``.
    public func result(onCancellation: TaskCancellationBehavior = .stopTransfer) async throws(DownloadError)
        -> DownloadResult
    {
        switch onCancellation {
        case .stopTransfer:
            return try await withTaskCancellationHandler {
                await control.wait()
            } onCancel: {
                control.requestStop(.pause, byTaskCancellation: true)
                if !self.started.load(ordering: .acquiring) {
                    control.finish(.failure(DownloadError(.paused, "paused before it started")))
                }
            }.get()
        case .continueTransfer:
            let ticket = control.makeWaitTicket()
            let outcome = await withTaskCancellationHandler {
                await control.wait(ticket: ticket)
            } onCancel: {
                control.abandonWait(ticket: ticket)
            }
            guard let outcome else {
                throw DownloadError(.cancelled, "the task awaiting the download was cancelled; the transfer goes on")
            }
            return try outcome.get()
        }
    }

    /// Stops the transfer, makes every received byte durable, and returns the resume data (a property
    /// list, see docs/RESUME-INFO.md). Returns nil if the download had already ended without
    /// partial data (completed, cancelled) or never created any.
    public func pause() async -> Data? {
        control.requestStop(.pause)
        if !started.load(ordering: .acquiring) {
            control.finish(.failure(DownloadError(.paused, "paused before it started")))
            return nil
        }
        _ = await control.wait()
        return control.resumeData
    }

    /// Stops the transfer and removes its partial data and resume info.
    public func cancel() async {
        control.requestStop(.cancel)
        if !started.load(ordering: .acquiring) {
            control.finish(.failure(DownloadError(.cancelled, "cancelled before it started")))
            return
        }
        _ = await control.wait()
    }

    /// Downloads `request` to the end.
    public static func run(
        _ request: DownloadRequest, configuration: DownloadConfiguration = DownloadConfiguration(),
        client: DKHTTPClient? = nil
    ) async throws(DownloadError) -> DownloadResult {
        let download = Download(request, configuration: configuration, client: client, keepsEventBacklog: false)
        download.start()
        return try await download.result()
    }
}

/// What a cancelled task awaiting ``Download/result(onCancellation:)`` does to the transfer.
public enum TaskCancellationBehavior: Sendable, Hashable {
    /// Stop the transfer like ``Download/pause()`` (every durable byte kept) and throw `.cancelled`
    /// carrying the resume data. The default: structured concurrency owns the transfer.
    case stopTransfer
    /// Leave the transfer running detached; only the wait ends.
    case continueTransfer
}
