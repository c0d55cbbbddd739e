import DownloadKit
import Foundation

/// Where a ``DownloadManager`` keeps its tasks: one row per ``ManagedTask``.
///
/// Two implementations: ``TaskStore`` (SQLite through GRDB in the state directory, the default) and
/// `PostgresTaskStore` in the `DownloadKitPostgres` product (a queue a fleet of hosts shares, docs/FLEET.md).
/// The manager reads every task once when it opens and then hands over the tasks it changed; a store
/// writes them in the order handed over, each batch in one transaction.
public protocol TaskStoring: AnyObject, Sendable {
    /// Where the tasks live, for messages (a directory, a server).
    var location: String { get }

    /// Every stored task.
    func loadTasks() async throws -> [ManagedTask]

    /// Inserts or updates `tasks` and deletes the tasks with ids `deletions` in one transaction, after every
    /// write handed over before; returns once it is committed.
    func save(_ tasks: [ManagedTask], deleting deletions: [String]) async throws

    /// The same transaction, handed over without waiting: writes keep their order, and `failed` is called
    /// (on any thread) if it fails.
    func saveInBackground(_ tasks: [ManagedTask], deleting deletions: [String], failed: @escaping @Sendable (any Error) -> Void)

    /// Returns once every write handed over before has finished.
    func drain() async
}

/// `[String: String]` as the JSON object text the stores keep headers and metadata in.
public enum TaskFieldsJSON {
    /// The object's text, keys sorted.
    public static func encode(_ dictionary: [String: String]) -> String { StringDictionaryJSON.encode(dictionary) }
    /// The dictionary a JSON object of strings holds; anything else (or nil) reads as empty.
    public static func decode(_ text: String?) -> [String: String] { StringDictionaryJSON.decode(text) }
}

/// A task's mirrors (``ManagedTask/mirrors``) as the JSON array text the stores keep them in.
public enum TaskMirrorsJSON {
    /// The array's text; nil (SQL NULL) for no mirrors.
    public static func encode(_ mirrors: [String]) -> String? { StringArrayJSON.encode(mirrors) }
    /// The mirrors a JSON array of strings holds; anything else (or nil: a damaged row) reads as none.
    public static func decode(_ text: String?) -> [String] { StringArrayJSON.decode(text) }
}
