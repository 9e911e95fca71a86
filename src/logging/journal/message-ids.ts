// One fixed MESSAGE_ID per event reason, as systemd's catalog has one per message kind, so
// `journalctl MESSAGE_ID=...` finds every event of a kind. Never change an id: operators filter on them.
// The table is listed in docs/operations.md; a test keeps it in step with the reasons recorded in src/.

export const EVENT_MESSAGE_IDS: Readonly<Record<string, string>> = {
  Created: 'e39d0f8d894f9c2f1563d08b5c988221',
  DeletionRequested: '5f10e1b2e9c56c2ad717fb7202f8985a',
  PowerChanged: '45a5f2371166be2ddecb5820a4b862b9',
  AnnotationsChanged: '2f80563cafd91fdd9f0723367d2bb280',
  Started: 'ff7274a32a6f61ad92896c5a351b7097',
  Stopped: 'abe7531a4ab33f41c84ccb001891e3e9',
  StartedOutsideAgent: '2703967aee8a07979e038f8ed1a361d3',
  StoppedOutsideAgent: 'de2e780e0df7194e064522f8c7d81e16',
  DomainUndefined: 'd40c01919ede1fb9a6a1d75a5860aab6',
  OrphanDomain: '80811b095f10545bdefde58d547818d0',
  ForeignDomain: '89cd639d8f6984bb9cdc2ce7914ec6c5',
  ReconcileFailed: 'ec075720868a33fa52e279fac261ce9e',
  ShutdownRequested: 'ad9b7e0737327e02b6bf4fd96a019383',
  ShutdownRetried: 'b9184df1ec726d7972785ccf809b8db3',
  ShutdownCompleted: 'c96d468456c15b6400e39b1c7042657e',
  ForceStopped: 'f510dac678996d2afd18ec2cd8b397f2',
  CleanupFailed: '15156d8998c200a1f63d36472ed82819',
  Deleted: '372f0ba464e1dc9c6588bd478e5f9dfe',
  HostShutdownStarted: '1ce5497138e64afcb6997cf45c6342ca',
  HostShutdownCompleted: '2ffcb24992694e65b8d16f046540827c',
  Saved: '2c3079b3ca664618a5f29b669dd77b67',
  SaveFailed: 'cba1ee70ebab4864bdbe1a4599cd05fc',
  StopFailed: '3ef6c860f8cb41a18d0b5d5ceb373fe4',
  Restored: 'cfea175a86234ed28df03ac803b87f00',
  RestoreFailed: '290f6e74383345beba7201df7b72b210',
  SavedStateDiscarded: 'aacee927ff5646659fc1202bed73e67b',
};

/** The id of an event reason, or undefined for a reason the table does not list. */
export function eventMessageId(reason: unknown): string | undefined {
  return typeof reason === 'string' && Object.hasOwn(EVENT_MESSAGE_IDS, reason) ? EVENT_MESSAGE_IDS[reason] : undefined;
}
