// The base of layer-std's stateless layers: core's `StatelessLayer`, which every plugin's layers share.
export { StatelessLayer } from '@metrale/core';
