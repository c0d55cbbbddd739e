import Foundation
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
    private let control = DownloadControl()
    private let client: HTTPClient?
    private let started = Atomic<Bool>(false)

    /// Creates a download; nothing happens until ``start()``.
    /// - Parameters:
    ///   - request: What to download and where.
    ///   - configuration: Retries, timeouts, limits, the URL provider.
    ///   - client: An HTTP client to share (connection reuse across downloads); one is created from
    ///     `configuration.client` when nil.
    public init(_ request: DownloadRequest, configuration: DownloadConfiguration = DownloadConfiguration(), client: HTTPClient? = nil) {
        self.request = request
        self.configuration = configuration
        self.client = client
    }

    /// Events in order: state changes with reasons, rate-limited progress, then `finished` or `failed`.
    /// The stream ends after the last event. Meant for one consumer; slow consumers lose the oldest
    /// progress events first (the newest 512 are kept).
    public var events: AsyncStream<DownloadEvent> { control.events }

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
        let thread = Thread {
            let outcome: Result<DownloadResult, DownloadError>
            do throws(DownloadError) {
                let engine = try TransferEngine(
                    request: request, configuration: configuration, control: control, client: client)
                outcome = .success(try engine.run())
            } catch {
                outcome = .failure(error)
            }
            control.finish(outcome)
        }
        thread.name = "DownloadKit transfer"
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Waits for the end.
    /// - Returns: The finished download.
    /// - Throws: ``DownloadError``; `.paused` and `.cancelled` when stopped by the caller.
    public func result() async throws(DownloadError) -> DownloadResult {
        try await control.wait().get()
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
        client: HTTPClient? = nil
    ) async throws(DownloadError) -> DownloadResult {
        let download = Download(request, configuration: configuration, client: client)
        download.start()
        return try await download.result()
    }
}
