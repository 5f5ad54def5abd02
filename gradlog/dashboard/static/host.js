// The channel TensorBoard opens to an iframed plugin. The plugin posts the string
// "experimental.bootstrap" to its parent with one MessagePort; over that port both sides send
// JSON messages {type, id, payload, error, isReply}, and every message that is not a reply
// expects one. The host sends "experimental.DataReloaded" after each reload (the reload
// button and the auto-reload timer), which is what lets the dashboard follow a run that is
// still being written.

export function connectToHost(listeners) {
  if (window.parent === window) {
    return null; // opened on its own, outside TensorBoard: nothing to connect to
  }
  const channel = new MessageChannel();
  const port = channel.port1;
  port.addEventListener('message', async (event) => {
    const message = JSON.parse(event.data);
    if (message.isReply) {
      return;
    }
    let error = null;
    try {
      const listener = listeners[message.type];
      if (listener) {
        await listener(message.payload);
      }
    } catch (failure) {
      error = String(failure);
    }
    port.postMessage(JSON.stringify(
        {type: message.type, id: message.id, payload: null, error, isReply: true}));
  });
  port.start();
  window.parent.postMessage('experimental.bootstrap', window.location.origin, [channel.port2]);
  return port;
}
